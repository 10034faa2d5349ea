// A model extends a module: only models can be extended.
import "nn.mm"
// expected-error@+1:17 {{'Linear' is a module, not a model: a model can only extend a model}}
model M extends Linear {
  train { optimizer = sgd(lr = 0.1) }
}
