// A correct model: no diagnostics, exit 0.
import "nn.mm"
model M {
  let B = 2
  fc = Linear(8, 4)
  forward(x: f32[B, 8], y: i32[B]) -> loss { return cross_entropy(fc(x), y) }
}
