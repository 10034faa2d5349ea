// expected-error@+1:8 {{import cycle}}
import "cycle_b.mm"
module A(d: int) { forward(x) { return x } }
