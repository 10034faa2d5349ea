// A conversation key under text data (the default format of a data section).
import "gpt2.mm"
model M extends GPT2Tiny {
  data {
    source = "data_text_conv_key.mm"
    // expected-error@+1:5 {{'images' is not a setting of format = text, a data section's default (it takes source, tokenizer, seq_len, pack, too_long and bad_samples)}}
    images = "."
  }
}
