// frame_classifier.mm: the text-to-video evaluation's frame classifier (the
// issue's "a classifier trained on real clips' frames"): a 2-layer ViT on
// one 64x64 frame of a moving-item clip (8x8 patches, the CLS token into a
// linear head) that names the item's class. FrameViT trains it on the
// clip-frame task (runtime/mmrt_task_frames.c: train-split clips' frames;
// the trainer's accuracy is on held-out clips' frames); a sampler's model
// adds `classifier = FrameClassifier()` and a forward `classify` and loads
// these weights by name (README "Sampling").
import "internvit.mm"

module FrameClassifier(classes: int = 10, dim: int = 64) {
  vit  = InternViT(image = 64, patch = 8, dim = dim, depth = 2, heads = 4, ffn = 2 * dim,
                   channels = 1)
  norm = LayerNorm(dim)
  head = Linear(dim, classes)

  // frames [N, 1, 64, 64] in [0, 1] -> logits [N, classes]
  forward(frames: [N, 1, 64, 64]) -> [N, classes] { return head(norm(vit(frames * 2.0 - 1.0)[:, 0])) }
}

model FrameViT {
  let B = 32
  classifier = FrameClassifier()

  forward(frames: f32[B, 1, 64, 64], labels: i32[B]) -> loss {
    return cross_entropy(classifier(frames), labels)
  }

  train {
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}
