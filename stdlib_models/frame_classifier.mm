// frame_classifier.mm: the text-to-video evaluation's frame classifier (the
// issue's "a classifier trained on real clips' frames"): a 2-layer ViT on
// one 64x64 frame of a moving-item clip (8x8 patches, the CLS token into a
// linear head) that names the item's class. FrameViT trains it on the
// clip-frame task (runtime/feeders/mmrt_feed_frames.c: train-split clips' frames;
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

  data { format = clips_frames }
  train {
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

// FrameCNN: a small convolutional frame classifier (what tools/t2v.sh
// trains): three 3x3 stride-2 convolutions (64 -> 32 -> 16 -> 8), one 3x3 at
// 8x8, ReLU, the mean over positions (the item may be anywhere on the
// canvas) into LayerNorm and a linear head.
module FrameCNN(classes: int = 10, width: int = 32) {
  c1   = Conv2d(1, width, 3, stride = 2, padding = 1)
  c2   = Conv2d(width, 2 * width, 3, stride = 2, padding = 1)
  c3   = Conv2d(2 * width, 4 * width, 3, stride = 2, padding = 1)
  c4   = Conv2d(4 * width, 4 * width, 3, stride = 1, padding = 1)
  norm = LayerNorm(4 * width)
  head = Linear(4 * width, classes)

  // frames [N, 1, 64, 64] in [0, 1] -> logits [N, classes]
  forward(frames: [N, 1, 64, 64]) -> [N, classes] {
    h = relu(c2(relu(c1(frames * 2.0 - 1.0))))
    h = relu(c4(relu(c3(h))))
    p = sum(h.reshape(N, 4 * width, 64), axis = 2) * (1.0 / 64)
    return head(norm(p))
  }
}

// frames [N, 1, 64, 64] -> each 4x4 block of pixels replaced by its mean
// (what the DiT's stand-in latents keep of a frame, t2v_sample.mm)
module BlockMean {
  forward(x: [N, 1, 64, 64]) -> [N, 1, 64, 64] {
    m = sum(sum(x.reshape(N, 16, 4, 16, 4), axis = 4), axis = 2) * (1.0 / 16)
    return m.reshape(N, 16, 1, 16, 1).expand(N, 16, 4, 16, 4).reshape(N, 1, 64, 64)
  }
}

// FrameCNN on real frames of train-split clips, the second half of each
// batch as their 4x4 block means (augmentation: the stand-in decode's
// resolution); the trainer's accuracy is on held-out frames, half of them
// block means likewise. FrameCNNReal and FrameCNNBlocks evaluate the same
// weights (--init-from, --steps 0) on held-out frames as they are and as
// block means alone.
model FrameCNNFit {
  let B = 64
  classifier = FrameCNN()
  blocks     = BlockMean()

  forward(frames: f32[B, 1, 64, 64], labels: i32[B]) -> loss {
    x = concat([frames[0:B // 2], blocks(frames[B // 2:B])], axis = 0)
    return cross_entropy(classifier(x), labels)
  }

  data { format = clips_frames }
  train {
    optimizer = adamw(lr = 2e-3, betas = [0.9, 0.999], weight_decay = 0.05, clip = 1.0)
    schedule  = cosine(warmup = 50)
  }
}

model FrameCNNReal extends FrameCNNFit {
  forward(frames: f32[B, 1, 64, 64], labels: i32[B]) -> loss {
    return cross_entropy(classifier(frames), labels)
  }
}

model FrameCNNBlocks extends FrameCNNFit {
  forward(frames: f32[B, 1, 64, 64], labels: i32[B]) -> loss {
    return cross_entropy(classifier(blocks(frames)), labels)
  }
}
