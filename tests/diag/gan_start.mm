// gan: a negative start is an error at the value.
import "wfvae.mm"

model N extends WFVAETinyGAN {
  train {
    // expected-error@+1:59 {{gan start is a number of steps (0 or more), not -1}}
    gan = gan(discriminator = disc, weight = 0.5, start = -1)
  }
}
