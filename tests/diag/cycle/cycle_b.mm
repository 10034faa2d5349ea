// DIAG-SKIP: a helper file imported by cycle_a.mm
import "cycle_a.mm"
module B(d: int) { forward(x) { return x } }
