// Extension: the derived model is the base's members in the base's order,
// each replaced in place by a derived member of the same name, then the
// other derived members. No diagnostics, exit 0.
import "nn.mm"
model Base {
  let B = 2
  let d = 4
  fc = Linear(d, 3)
  forward(x: f32[B, d], y: i32[B]) -> loss { return cross_entropy(fc(x), y) }
  train { optimizer = sgd(lr = 0.1) }
}
// `let d = 8` replaces Base's d in place, so fc is Linear(8, 3): the
// inherited forward takes x: f32[2, 8]; the train section is replaced whole.
model Wide extends Base {
  let d = 8
  train { optimizer = adamw(lr = 1e-3); schedule = cosine(warmup = 2) }
}
// Chains of extensions, a replaced forward, appended members (a parameter
// and a parallel section) and a base declared after its extension.
model Scaled extends Later {
  scale = param f32[3] = ones
  forward(x: f32[B, d], y: i32[B]) -> loss { return cross_entropy(fc(x) * scale, y) }
  parallel { dp = 2 }
}
model Later extends Wide {
  let B = 4
}
