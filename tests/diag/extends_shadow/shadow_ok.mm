// A base from another file, extended where its module names mean the same
// modules (nn.mm is reached through shadow_base.mm): no diagnostics.
import "shadow_base.mm"
model N extends Base {
  train { optimizer = sgd(lr = 0.1) }
}
