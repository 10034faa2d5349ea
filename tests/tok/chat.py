"""Checks `mmc tokenize --chat FAMILY` (tests/tokenizers.sh): for generated
conversations, the ids equal `tokenizers`' encoding of the text the family's
published template renders (rendered here in Python, by hand, from the
sources cited below), and the mask is 1 exactly on the tokens whose offsets
(from `tokenizers`) overlap an assistant span: the reply and its end token.

usage: chat.py MMC WORKDIR"""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

QWEN2_SYSTEM = "You are a helpful assistant."
INTERNVL2_SYSTEM = ("你是由上海人工智能实验室联合商汤科技开发的书生多模态大模型，英文名叫InternVL, "
                    "是一个有用无害的人工智能助手。")
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's "
                 "questions.")


def render(family, msgs):
    """(text, assistant spans as character ranges, BOS ahead?)"""
    text, spans = "", []

    def asst(s):
        nonlocal text
        spans.append((len(text), len(text) + len(s)))
        text += s

    if family in ("chatml", "qwen2"):
        # Qwen/Qwen2-7B-Instruct tokenizer_config.json chat_template:
        # {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
        # {{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}
        # {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
        # {% endfor %}   (chatml: the same without the default system message)
        if family == "qwen2" and msgs and msgs[0]["role"] != "system":
            text += "<|im_start|>system\n" + QWEN2_SYSTEM + "<|im_end|>\n"
        for m in msgs:
            text += "<|im_start|>" + m["role"] + "\n"
            if m["role"] == "assistant":
                asst(m["content"] + "<|im_end|>")
            else:
                text += m["content"] + "<|im_end|>"
            text += "\n"
        return text, spans, False
    sys_msg = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else None
    rest = msgs[1:] if sys_msg is not None else msgs
    if family == "internvl2":
        # OpenGVLab/InternVL internvl_chat/internvl/conversation.py, 'Hermes-2' and
        # 'internlm2-chat': system_template '<|im_start|>system\n{system_message}',
        # roles ('<|im_start|>user\n', '<|im_start|>assistant\n'), SeparatorStyle.MPT,
        # sep '<|im_end|>': ret = system + sep; ret += role + message + sep per message
        text = "<|im_start|>system\n" + (sys_msg if sys_msg is not None else INTERNVL2_SYSTEM)
        text += "<|im_end|>"
        for m in rest:
            text += "<|im_start|>" + m["role"] + "\n"
            if m["role"] == "assistant":
                asst(m["content"] + "<|im_end|>")
            else:
                text += m["content"] + "<|im_end|>"
        return text, spans, False
    if family == "llama2":
        # meta-llama/Llama-2-7b-chat-hf tokenizer_config.json chat_template: a system message
        # becomes '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + the first user content; user:
        # bos_token + '[INST] ' + content.strip() + ' [/INST]'; assistant:
        # ' ' + content.strip() + ' ' + eos_token
        for i, m in enumerate(rest):
            c = m["content"]
            if m["role"] == "user":
                if i == 0 and sys_msg is not None:
                    c = "<<SYS>>\n" + sys_msg + "\n<</SYS>>\n\n" + c
                text += "<s>[INST] " + c.strip() + " [/INST]"
            else:
                asst(" " + c.strip() + " </s>")
        return text, spans, False
    # vicuna: haotian-liu/LLaVA llava/conversation.py conv_vicuna_v1 (LLaVA-1.5's "v1"),
    # SeparatorStyle.TWO, sep " ", sep2 "</s>": ret = system + sep; then
    # role + ": " + message + seps[i % 2]; tokenizer(prompt) adds BOS
    text = (sys_msg if sys_msg is not None else VICUNA_SYSTEM) + " "
    for i, m in enumerate(rest):
        if i % 2 == 0:
            text += "USER: " + m["content"] + " "
        else:
            text += "ASSISTANT:"
            asst(" " + m["content"] + "</s>")
    return text, spans, True


def conversations(rng, lines, n, alternate):
    out = [[]]  # no messages at all
    for _ in range(n):
        msgs = []
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": rng.choice(lines)})
        for t in range(rng.randint(1, 5)):
            role = ("user", "assistant")[t % 2] if alternate or rng.random() < 0.8 else "tool"
            c = rng.choice(lines)
            r = rng.random()
            if r < 0.15:
                c = " " + c + "  "
            elif r < 0.3:
                c = c + "\n" + rng.choice(lines)
            elif r < 0.35:
                c = "\n" + c
            msgs.append({"role": role, "content": c})
        out.append(msgs)
    return out


def main():
    mmc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = random.Random(7)
    train = compare.corpus(1, 1500)
    lines = [s for s in compare.corpus(3, 300) if len(s) < 400]
    toks = {"qwen2": compare.qwen2(train), "llama2": compare.llama2(train, work)}
    fails = checked = 0
    for family, tname in (("chatml", "qwen2"), ("qwen2", "qwen2"), ("internvl2", "qwen2"),
                          ("llama2", "llama2"), ("vicuna", "llama2")):
        path = os.path.join(work, tname + "_chat.json")
        toks[tname].save(path)
        tok = Tokenizer.from_file(path)
        convs = conversations(rng, lines, 150, family in ("llama2", "vicuna"))
        jsonl = "".join(json.dumps({"messages": c}, ensure_ascii=False) + "\n" for c in convs)
        p = subprocess.run([mmc, "tokenize", path, "--chat", family], input=jsonl.encode(),
                           capture_output=True)
        if p.returncode != 0:
            print("FAIL %s: mmc exit %d: %s" % (family, p.returncode, p.stderr.decode()[:300]))
            fails += 1
            checked += 1
            continue
        out = p.stdout.decode().split("\n")
        bad_ids = bad_mask = 0
        ntok = nmask = 0
        for k, c in enumerate(convs):
            text, spans, bos = render(family, c)
            enc = tok.encode(text, add_special_tokens=bos)  # bos: the "<s> $A" template
            want = enc.ids
            mask = [int(e > s and any(s < b and e > a for a, b in spans)) for s, e in enc.offsets]
            if bos:
                mask[0] = 0
            got = [int(x) for x in out[2 * k].split()]
            gmask = [int(x) for x in out[2 * k + 1].split()]
            ntok += len(want)
            nmask += sum(mask)
            if got != want:
                bad_ids += 1
                if bad_ids <= 2:
                    print("  %s conversation %d ids:\n    text %r\n    tokenizers %s\n    mmc %s" %
                          (family, k, text[:200], want[:30], got[:30]))
            elif gmask != mask:
                bad_mask += 1
                if bad_mask <= 2:
                    print("  %s conversation %d mask:\n    text %r\n    want %s\n    mmc  %s" %
                          (family, k, text[:200], mask, gmask))
        print("%s chat %s: ids %d/%d conversations identical, masks %d/%d (%d tokens, %d in the "
              "mask)" % ("FAIL" if bad_ids or bad_mask else "PASS", family,
                         len(convs) - bad_ids, len(convs), len(convs) - bad_mask, len(convs), ntok,
                         nmask))
        fails += bool(bad_ids or bad_mask)
        checked += 1
    # refusals: roles that do not alternate; a family without its special tokens
    path = os.path.join(work, "llama2_chat.json")
    bad = json.dumps({"messages": [{"role": "assistant", "content": "x"}]}) + "\n"
    p = subprocess.run([mmc, "tokenize", path, "--chat", "llama2"], input=bad.encode(),
                       capture_output=True)
    ok = p.returncode == 1 and b"<stdin>:1: messages[0]: role 'assistant' where llama2 expects " \
                               b"'user'" in p.stderr
    print("%s chat llama2 refuses an assistant first (%s)" % ("PASS" if ok else "FAIL",
                                                              p.stderr.decode().strip()))
    p = subprocess.run([mmc, "tokenize", path, "--chat", "qwen2"], input=bad.encode(),
                       capture_output=True)
    ok2 = p.returncode == 1 and b"chat format qwen2 needs '<|im_start|>' as an added token" in p.stderr
    print("%s chat qwen2 refuses a tokenizer without <|im_start|> (%s)" %
          ("PASS" if ok2 else "FAIL", p.stderr.decode().strip()))
    fails += (not ok) + (not ok2)
    checked += 2
    print("%d passed, %d failed" % (checked - fails, fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
