// DIAG-SKIP: a helper file imported by shadow.mm
import "nn.mm"
model Base {
  fc = Linear(4, 3)
  forward(x: f32[2, 4]) -> loss { return mean(fc(x)) }
}
