// Module names of inherited members are looked up from the extending
// model's file: here `Linear` is this file's module, not nn.mm's one that
// Base's `fc = Linear(4, 3)` means, so the extension is an error.
import "shadow_base.mm"
// expected-note@+1:8 {{'Linear' seen from 'M' is this one}}
module Linear(a: int, b: int) {
  forward(x) { return x }
}
// expected-error@+1:17 {{'M' inherits 'fc = Linear(...)' from 'Base', but 'Linear' seen from this file is another declaration than where 'fc' is written}}
model M extends Base {
  train { optimizer = sgd(lr = 0.1) }
}
