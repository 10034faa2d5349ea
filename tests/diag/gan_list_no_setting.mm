// A forward returning [loss, generator term, discriminator loss] needs the train section's gan setting.
import "nn.mm"

module D {
  fc = Linear(4, 1)
  forward(x) { return fc(x) }
}
model M {
  gen  = Linear(4, 4)
  disc = D()
  // expected-error@+1:3 {{the forward of model 'M' returns [loss, generator term, discriminator loss], but its train section has no gan = gan(discriminator = ..., weight = ...)}}
  forward(x: f32[2, 4]) -> loss {
    fake = gen(x)
    return [mean(fake * fake), mean(disc(fake)) * -1.0, mean(relu(1.0 + disc(detach(fake))))]
  }
}
