// gan: a model whose forward returns one loss (WF-VAE with `let gan = false`) cannot train a discriminator.
import "wfvae.mm"

model M extends WFVAETiny {
  train {
    // expected-error@+1:5 {{gan: the forward of model 'M' must return [loss, generator term, discriminator loss], not one loss}}
    gan = gan(discriminator = decoder, weight = 0.5)
  }
}
