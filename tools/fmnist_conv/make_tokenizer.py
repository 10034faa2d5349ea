"""The main job's tokenizer (tools/fmnist_conv/tokenizer.json, committed),
trained by `tokenizers` (the tok venv: bash tools/test_venvs.sh tok):
  python make_tokenizer.py OUT.json
a BPE of a small vocabulary on the questions and class names of
make_data.py, whitespace pre-tokenized, with the chat and image tokens as
added tokens (<image> is id 7: InternVL2TinyConv's IMG under --chat chatml).
The same file every run (tests/main_data.sh compares it with the committed
one)."""
import os
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_data import CLASSES, QUESTIONS  # noqa: E402

SPECIAL = ["[UNK]", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>",
           "<IMG_CONTEXT>", "<image>"]


def main():
    texts = QUESTIONS + CLASSES + ["user", "assistant", "system"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts * 10, trainers.BpeTrainer(vocab_size=120, show_progress=False,
                                                            special_tokens=SPECIAL))
    tok.save(sys.argv[1])


if __name__ == "__main__":
    main()
