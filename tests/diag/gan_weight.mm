// gan: a weight that is not positive, and a negative start, are errors at the value.
import "wfvae.mm"

model M extends WFVAETinyGAN {
  train {
    // expected-error@+1:46 {{gan weight must be positive, not 0 (leave the setting out for no discriminator)}}
    gan = gan(discriminator = disc, weight = 0.0, start = 5)
  }
}
