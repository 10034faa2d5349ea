"""A BPE tokenizer.json for a JSONL corpus's "text" fields, trained by the
`tokenizers` library: whitespace-split words, VOCAB ids at most (so that it
fits a small model's vocabulary, e.g. GPT2Tiny's 256), [UNK], and
<|endoftext|> closing every document; ChatML's <|im_start|>, <|im_end|> as
added tokens (chat samples).
  python bpe.py CORPUS.jsonl VOCAB OUT.json"""
import json
import sys


def train(texts, vocab, out):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tr = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                             special_tokens=["[UNK]", "<|endoftext|>", "<|im_start|>",
                                             "<|im_end|>"])
    tok.train_from_iterator(texts, tr)
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", eot)])
    tok.save(out)
    return tok


if __name__ == "__main__":
    texts = [json.loads(l).get("text", "") for l in open(sys.argv[1], encoding="utf-8")]
    train(texts, int(sys.argv[2]), sys.argv[3])
