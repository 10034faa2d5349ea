// WF-VAE (Li et al., "WF-VAE: Enhancing Video VAE by Wavelet-Driven Energy
// Flow", OpenSoraPlan 1.3's video autoencoder), written from the structure
// of PKU-YuanGroup's modeling_wfvae.py: a 3D Haar transform of the clip
// feeds the main path; two more wavelet levels (a 2D Haar of the low band,
// then a 3D Haar of its low band) join it through "energy-flow" convolutions;
// the decoder mirrors it and its own wavelet levels add into the inverse
// transforms. Compression 4x8x8 (t x h x w) for clips of 1 + 4k frames.
//
// Layout: video [B, C, T, H, W]. The reference applies its 2D layers
// (Conv2d, ResnetBlock2D, Downsample, Upsample, the 2D Haar) frame by frame;
// here frames are [B*T, C, H, W] and FrameConv2d is a Conv2d applied to
// every frame of a video. Layer norm over channels (or group norm), SiLU.
// Wavelets as the reference: sub-bands band-major (channel k*C + c is band k
// of input channel c), 3D coefficients +-0.3536 (not 1/sqrt 8), the causal
// form (the first frame once more in front, dropped after the inverse).
import "nn.mm"

// ---- wavelets (no parameters) ----

// WF-VAE's HaarWaveletTransform3D: [B, C, 1 + 2k, H, W] -> [B, 8C, 1 + k, H/2, W/2]
module Haar3D(channels: int) {
  forward(x: [B, channels, T, H, W]) {
    c = haar3d(causal_pad(x, 1, keep = 0)) * 1.000131831310253 // frame 0 once more in front
    if channels == 1 {
      return c
    }
    let T2 = (T + 1) // 2
    return c.reshape(B, channels, 8, T2, H // 2, W // 2).transpose(1, 2).reshape(B, 8 * channels, T2, H // 2, W // 2)
  }
}

// InverseHaarWaveletTransform3D: [B, 8C, 1 + k, h, w] -> [B, C, 1 + 2k, 2h, 2w]
module IHaar3D(channels: int) {
  forward(c: [B, S, T, H, W]) {
    x = c
    if channels > 1 {
      x = c.reshape(B, 8, channels, T, H, W).transpose(1, 2).reshape(B, 8 * channels, T, H, W)
    }
    return (ihaar3d(x) * 1.000131831310253)[:, :, 1:]
  }
}

// HaarWaveletTransform2D on frames: [N, C, H, W] -> [N, 4C, H/2, W/2]
module Haar2D(channels: int) {
  forward(x: [N, channels, H, W]) {
    c = haar2d(x)
    if channels == 1 {
      return c
    }
    return c.reshape(N, channels, 4, H // 2, W // 2).transpose(1, 2).reshape(N, 4 * channels, H // 2, W // 2)
  }
}

module IHaar2D(channels: int) {
  forward(c: [N, S, H, W]) {
    if channels == 1 {
      return ihaar2d(c)
    }
    return ihaar2d(c.reshape(N, 4, channels, H, W).transpose(1, 2).reshape(N, 4 * channels, H, W))
  }
}

// ---- layers ----

// WF-VAE's Normalize, eps 1e-6: groups > 0 is GroupNorm(groups) (norm_type
// "groupnorm": statistics over a group's channels and every frame and
// position), groups = 0 LayerNorm over the channels at each frame and
// position (norm_type "layernorm", the published configurations': it never
// mixes frames, so the encoder stays causal and chunks encode losslessly).
// x: frames [N, C, H, W] or videos [B, C, T, H, W].
module Normalize(groups: int, ch: int) {
  weight = param f32[ch] = ones
  bias   = param f32[ch] = zeros

  forward(x) {
    if groups > 0 {
      return group_norm(x, weight, bias, groups = groups, eps = 1e-6)
    }
    // over dim 1 in place (no transposes to channels-last and back)
    return layer_norm(x, weight, bias, eps = 1e-6, axis = 1)
  }
}

// A Conv2d applied to every frame of [B, C, T, H, W] (the reference's
// video_to_image); parameters as nn.Conv2d.
module FrameConv2d(in_ch: int, out_ch: int, kernel: int = 3, padding: int = 1) {
  weight = param f32[out_ch, in_ch, kernel, kernel] = fan_in(1.0)
  bias   = param f32[out_ch] = zeros

  forward(x: [B, in_ch, T, H, W]) {
    f = x.transpose(1, 2).reshape(B * T, in_ch, H, W)
    y = conv2d(f, weight, bias, padding = padding)
    return y.reshape(B, T, out_ch, H + 2 * padding - kernel + 1, W + 2 * padding - kernel + 1).transpose(1, 2)
  }
}

// ResnetBlock2D on frames [N, C, H, W]: norm, SiLU, conv, norm, SiLU, conv,
// plus the input (through a 1x1 conv when the width changes).
module ResnetBlock2D(in_ch: int, out_ch: int, groups: int = 32) {
  norm1 = Normalize(groups, in_ch)
  conv1 = Conv2d(in_ch, out_ch, kernel = 3, padding = 1)
  norm2 = Normalize(groups, out_ch)
  conv2 = Conv2d(out_ch, out_ch, kernel = 3, padding = 1)
  if in_ch != out_ch {
    nin_shortcut = Conv2d(in_ch, out_ch, kernel = 1)
  }

  forward(x: [N, in_ch, H, W]) {
    h = conv2(silu(norm2(conv1(silu(norm1(x))))))
    if in_ch != out_ch {
      return nin_shortcut(x) + h
    }
    return x + h
  }
}

// ResnetBlock3D on [B, C, T, H, W] with causal 3x3x3 convolutions.
module ResnetBlock3D(in_ch: int, out_ch: int, groups: int = 32) {
  norm1 = Normalize(groups, in_ch)
  conv1 = CausalConv3d(in_ch, out_ch, 3, padding = 1)
  norm2 = Normalize(groups, out_ch)
  conv2 = CausalConv3d(out_ch, out_ch, 3, padding = 1)
  if in_ch != out_ch {
    nin_shortcut = CausalConv3d(in_ch, out_ch, 1)
  }

  forward(x: [B, in_ch, T, H, W]) {
    h = conv2(silu(norm2(conv1(silu(norm1(x))))))
    if in_ch != out_ch {
      return nin_shortcut(x) + h
    }
    return x + h
  }
}

// Downsample (frames): zero-pad right and bottom by one, 3x3 conv, stride 2.
module Downsample(ch: int) {
  conv = Conv2d(ch, ch, kernel = 3, stride = 2)

  forward(x: [N, ch, H, W]) {
    xw = concat([x, zeros(N, ch, H, 1)], axis = 3)
    return conv(concat([xw, zeros(N, ch, 1, W + 1)], axis = 2))
  }
}

// Upsample (frames): nearest 2x, 3x3 conv.
module Upsample(ch: int) {
  conv = Conv2d(ch, ch, kernel = 3, padding = 1)

  forward(x: [N, ch, H, W]) {
    up = x.reshape(N, ch, H, 1, W, 1).expand(N, ch, H, 2, W, 2).reshape(N, ch, 2 * H, 2 * W)
    return conv(up)
  }
}

// Spatial2xTime2x3DDownsample: zero-pad right and bottom, causal 3x3x3 conv, stride 2.
module Spatial2xTime2x3DDownsample(ch: int) {
  conv = CausalConv3d(ch, ch, 3, stride = 2)

  forward(x: [B, ch, T, H, W]) {
    xw = concat([x, zeros(B, ch, T, H, 1)], axis = 4)
    return conv(concat([xw, zeros(B, ch, T, 1, W + 1)], axis = 3))
  }
}

// 2x linear interpolation along one axis of [B, C, T, H, W] (2, 3 or 4), as
// F.interpolate(mode = "trilinear", align_corners = False) with scale 2 on
// that axis and 1 on the others: out[2i] = 3/4 x[i] + 1/4 x[i-1],
// out[2i+1] = 3/4 x[i] + 1/4 x[i+1], the neighbours clamped at the ends.
module Lerp2x(axis: int) {
  forward(x: [B, C, T, H, W]) {
    if axis == 4 and W == 1 {
      return x.reshape(B, C, T, H, W, 1).expand(B, C, T, H, W, 2).reshape(B, C, T, H, 2 * W)
    }
    if axis == 4 {
      prev = concat([x[:, :, :, :, 0:1], x[:, :, :, :, 0:W - 1]], axis = 4)
      next = concat([x[:, :, :, :, 1:W], x[:, :, :, :, W - 1:W]], axis = 4)
      even = (x * 0.75 + prev * 0.25).reshape(B, C, T, H, W, 1)
      odd = (x * 0.75 + next * 0.25).reshape(B, C, T, H, W, 1)
      return concat([even, odd], axis = 5).reshape(B, C, T, H, 2 * W)
    }
    if axis == 3 and H == 1 {
      return x.reshape(B, C, T, H, 1, W).expand(B, C, T, H, 2, W).reshape(B, C, T, 2 * H, W)
    }
    if axis == 3 {
      prev = concat([x[:, :, :, 0:1], x[:, :, :, 0:H - 1]], axis = 3)
      next = concat([x[:, :, :, 1:H], x[:, :, :, H - 1:H]], axis = 3)
      even = (x * 0.75 + prev * 0.25).reshape(B, C, T, H, 1, W)
      odd = (x * 0.75 + next * 0.25).reshape(B, C, T, H, 1, W)
      return concat([even, odd], axis = 4).reshape(B, C, T, 2 * H, W)
    }
    if T == 1 {
      return x.reshape(B, C, T, 1, H, W).expand(B, C, T, 2, H, W).reshape(B, C, 2 * T, H, W)
    }
    prev = concat([x[:, :, 0:1], x[:, :, 0:T - 1]], axis = 2)
    next = concat([x[:, :, 1:T], x[:, :, T - 1:T]], axis = 2)
    even = (x * 0.75 + prev * 0.25).reshape(B, C, T, 1, H, W)
    odd = (x * 0.75 + next * 0.25).reshape(B, C, T, 1, H, W)
    return concat([even, odd], axis = 3).reshape(B, C, 2 * T, H, W)
  }
}

// Spatial2xTime2x3DUpsample: frame 0 bilinear 2x in space; the later frames
// 2x in time (t_interpolation "trilinear": linear; "nearest": repeated),
// then bilinear 2x in space; a causal 3x3x3 conv. 1 + k frames -> 1 + 2k.
module Spatial2xTime2x3DUpsample(ch: int, t_interpolation: string = "trilinear") {
  conv = CausalConv3d(ch, ch, 3, padding = 1)
  up_t = Lerp2x(2)
  up_h = Lerp2x(3)
  up_w = Lerp2x(4)

  forward(x: [B, ch, T, H, W]) {
    first = up_w(up_h(x[:, :, 0:1]))
    if T == 1 {
      return conv(first)
    }
    rest = x[:, :, 1:]
    if t_interpolation == "trilinear" {
      rest = up_t(rest)
    } else {
      rest = rest.reshape(B, ch, T - 1, 1, H, W).expand(B, ch, T - 1, 2, H, W).reshape(B, ch, 2 * T - 2, H, W)
    }
    return conv(concat([first, up_w(up_h(rest))], axis = 2))
  }
}

// AttnBlock3DFix: single-head attention over the H*W positions of each
// frame, q/k/v/proj_out 1x1x1 causal convolutions, plus the input. Written
// with matmul and softmax rather than `attention` (one head: under tp the
// channels split, which a head split cannot express; the [B*T, HW, HW]
// scores are small at these sizes).
module AttnBlock3D(ch: int, groups: int = 32) {
  norm     = Normalize(groups, ch)
  q        = CausalConv3d(ch, ch, 1)
  k        = CausalConv3d(ch, ch, 1)
  v        = CausalConv3d(ch, ch, 1)
  proj_out = CausalConv3d(ch, ch, 1)

  forward(x: [B, ch, T, H, W]) {
    h = norm(x)
    qs = q(h).permute(0, 2, 3, 4, 1).reshape(B * T, H * W, ch)
    ks = k(h).reshape(B, ch, T, H * W).permute(0, 2, 1, 3).reshape(B * T, ch, H * W)
    vs = v(h).permute(0, 2, 3, 4, 1).reshape(B * T, H * W, ch)
    p = softmax((qs @ ks) * (1.0 / sqrt(ch)), axis = -1)
    o = (p @ vs).reshape(B, T, H, W, ch).permute(0, 4, 1, 2, 3)
    return x + proj_out(o)
  }
}

// ---- encoder ----

module EncoderDown1(in_ch: int, base: int, nres: int, groups: int) {
  conv_in = Conv2d(in_ch, base, kernel = 3, padding = 1)
  res     = ResnetBlock2D(base, base, groups) x nres
  down    = Downsample(base)

  forward(x: [N, in_ch, H, W]) { return down(res(conv_in(x))) }
}

module EncoderDown2(in_ch: int, base: int, nres: int, groups: int) {
  conv_in = FrameConv2d(in_ch, 2 * base)
  res     = ResnetBlock3D(2 * base, 2 * base, groups) x nres
  down    = Spatial2xTime2x3DDownsample(2 * base)

  forward(x: [B, in_ch, T, H, W]) { return down(res(conv_in(x))) }
}

// The encoder: clip wavelet coefficients -> the posterior's mean and
// log-variance [B, 2 latent, 1 + k, H/8, W/8] (mean first).
module WFEncoder(channels: int = 3, latent: int = 8, base: int = 128, nres: int = 2,
                 energy_flow: int = 64, groups: int = 32, use_attention: bool = true) {
  down1      = EncoderDown1(8 * channels, base, nres, groups)
  down2      = EncoderDown2(base + energy_flow, base, nres, groups)
  connect_l1 = Conv2d(4 * channels, energy_flow, kernel = 3, padding = 1)
  connect_l2 = FrameConv2d(8 * channels, energy_flow)
  mid0       = ResnetBlock3D(2 * base + energy_flow, 4 * base, groups)
  if use_attention {
    mid_attn = AttnBlock3D(4 * base, groups)
  }
  mid1       = ResnetBlock3D(4 * base, 4 * base, groups)
  norm_out   = Normalize(groups, 4 * base)
  conv_out   = CausalConv3d(4 * base, 2 * latent, 3, padding = 1)

  // coeffs: Haar3D of the clip [B, 8C, T, H, W]; l1: Haar2D of its low band,
  // frames [B*T, 4C, H/2, W/2]; l2: Haar3D of that one's low band [B, 8C, T2, H/4, W/4]
  forward(coeffs: [B, S, T, H, W], l1: [N, S1, H1, W1], l2: [B, S2, T2, H2, W2]) {
    frames = coeffs.transpose(1, 2).reshape(B * T, S, H, W)
    h = concat([down1(frames), connect_l1(l1)], axis = 1)
    h = down2(h.reshape(B, T, base + energy_flow, H // 2, W // 2).transpose(1, 2))
    h = mid0(concat([h, connect_l2(l2)], axis = 1))
    if use_attention {
      h = mid_attn(h)
    }
    h = mid1(h)
    return conv_out(silu(norm_out(h)))
  }
}

// ---- decoder ----

module DecoderUp2(base: int, nres: int, energy_flow: int, groups: int, t_interpolation: string) {
  res  = ResnetBlock3D(4 * base, 4 * base, groups) x nres
  up   = Spatial2xTime2x3DUpsample(4 * base, t_interpolation)
  res_out = ResnetBlock3D(4 * base, 4 * base + energy_flow, groups)

  forward(x: [B, C, T, H, W]) { return res_out(up(res(x))) }
}

module DecoderUp1(base: int, nres: int, groups: int) {
  res0 = ResnetBlock3D(4 * base, 2 * base, groups)
  if nres > 1 {
    res = ResnetBlock3D(2 * base, 2 * base, groups) x nres - 1
  }
  up   = Upsample(2 * base)
  res_out = ResnetBlock3D(2 * base, 2 * base, groups)

  forward(x: [B, C, T, H, W]) {
    h = res0(x)
    if nres > 1 {
      h = res(h)
    }
    let w = 2 * base
    f = up(h.transpose(1, 2).reshape(B * T, w, H, W))
    return res_out(f.reshape(B, T, w, 2 * H, 2 * W).transpose(1, 2))
  }
}

module DecoderConnect(energy_flow: int, out_ch: int, n: int, groups: int) {
  res  = ResnetBlock3D(energy_flow, energy_flow, groups) x n
  conv = FrameConv2d(energy_flow, out_ch)

  forward(x: [B, C, T, H, W]) {
    if n > 0 {
      return conv(res(x))
    }
    return conv(x)
  }
}

// The decoder: a latent [B, latent, 1 + k, h, w] -> the clip, with its two
// wavelet levels (named forwards, so that the loss can compare them).
module WFDecoder(channels: int = 3, latent: int = 8, base: int = 128, nres: int = 2,
                 energy_flow: int = 128, groups: int = 32, use_attention: bool = true,
                 t_interpolation: string = "trilinear", connect_res: int = 1, tail: int = 0) {
  let tw = tail if tail > 0 else base // the last stage's width (the reference's: base)
  conv_in    = CausalConv3d(latent, 4 * base, 3, padding = 1)
  mid0       = ResnetBlock3D(4 * base, 4 * base, groups)
  if use_attention {
    mid_attn = AttnBlock3D(4 * base, groups)
  }
  mid1       = ResnetBlock3D(4 * base, 4 * base + energy_flow, groups)
  up2        = DecoderUp2(base, nres, energy_flow, groups, t_interpolation)
  up1        = DecoderUp1(base, nres, groups)
  layer0     = ResnetBlock3D(2 * base, tw, groups)
  layer1     = ResnetBlock3D(tw, tw, groups)
  connect_l1 = DecoderConnect(energy_flow, 4 * channels, connect_res, groups)
  connect_l2 = DecoderConnect(energy_flow, 8 * channels, connect_res, groups)
  norm_out   = Normalize(groups, tw)
  conv_out   = FrameConv2d(tw, 8 * channels)
  il2        = IHaar3D(channels)
  il1        = IHaar2D(channels)

  // z -> the mid block's output [B, 4 base + energy_flow, T, h, w]
  forward mid(z: [B, L, T, H, W]) {
    h = mid0(conv_in(z))
    if use_attention {
      h = mid_attn(h)
    }
    return mid1(h)
  }
  // the level-2 coefficients [B, 8C, T, h, w] from the mid output
  forward l2(m: [B, C, T, H, W]) { return connect_l2(m[:, 4 * base:]) }
  // the up2 output [B, 4 base + energy_flow, 2T - 1, 2h, 2w]
  forward up(m: [B, C, T, H, W]) { return up2(m[:, 0:4 * base]) }
  // the level-1 coefficients [B, 4C, T, H, W] (frames), the inverse of l2
  // added to their low band
  forward l1(u: [B, C, T, H, W], l2c: [B, S, T2, H2, W2]) {
    c = connect_l1(u[:, 4 * base:])
    return concat([c[:, 0:channels] + il2(l2c), c[:, channels:]], axis = 1)
  }
  // the clip's wavelet coefficients [B, 8C, T, 2H, 2W], the inverse of l1
  // added to their low band
  forward coeffs(u: [B, C, T, H, W], l1c: [B, S, T1, H1, W1]) {
    h = layer1(layer0(up1(u[:, 0:4 * base])))
    f = conv_out(silu(norm_out(h)))
    l1f = il1(l1c.transpose(1, 2).reshape(B * T1, 4 * channels, H1, W1))
    l1v = l1f.reshape(B, T1, channels, 2 * H1, 2 * W1).transpose(1, 2)
    return concat([f[:, 0:channels] + l1v, f[:, channels:]], axis = 1)
  }
}

// ---- the model ----

// The published configuration (WFVAEModel_D8_4x8x8 as OpenSoraPlan 1.3 and
// MindSpeed-MM configure it: latent 8, base channels 128, energy flow 64 in
// the encoder and 128 in the decoder, 2 ResNet blocks per level, mid-block
// attention, trilinear time upsampling, 2 ResNet blocks in each decoder
// connection). Loss as the reference's LPIPSWithDiscriminator3D without the
// perceptual and GAN terms: sum |x - x'| / (B T) + 1e-6 KL / B +
// wavelet_weight (sum |l1 - l1'| + sum |l2 - l2'|) / B.
model WFVAE {
  let B = 1
  let C = 3
  let F = 17
  let S = 256
  let latent = 8
  let base = 128
  let enc_energy_flow = 64
  let dec_energy_flow = 128
  let nres = 2
  let connect_res = 2
  let dec_tail = 0               // the decoder's last stage width (layer0, layer1, norm_out, conv_out); 0: base
  let groups = 0                 // 0: layer norm (norm_type "layernorm"); G > 0: GroupNorm(G)
  let kl_weight = 1e-6
  let wavelet_weight = 0.1
  let t_interpolation = "trilinear" // the decoder's 2x in time: "trilinear" or "nearest"
  let loss_type = "l1"            // the reconstruction term: "l1" |x - x'| or "l2" (x - x')^2
  let logvar_init = 0.0           // added to the log-variance: its start (conv_out's bias starts at 0)
  let gan = false                 // true: the 3D patch discriminator `disc` (with train { gan = gan(...) })
  let disc_ndf = 64               // its width, layers and dropout (the reference's defaults)
  let disc_layers = 4
  let disc_dropout = 0.3
  encoder = WFEncoder(C, latent, base, nres, enc_energy_flow, groups)
  decoder = WFDecoder(C, latent, base, nres, dec_energy_flow, groups, t_interpolation = t_interpolation,
                      connect_res = connect_res, tail = dec_tail)
  wavelet_in = Haar3D(C)
  wavelet_l1 = Haar2D(C)
  wavelet_l2 = Haar3D(C)
  wavelet_out = IHaar3D(C)
  if gan {
    disc = Discriminator3D(C, disc_ndf, disc_layers, disc_dropout)
  }

  forward(video: f32[B, C, F, S, S]) -> loss {
    let T1 = (F + 1) // 2
    let T2 = (T1 + 1) // 2
    coeffs = wavelet_in(video)                                   // [B, 8C, T1, S/2, S/2]
    frames = coeffs.transpose(1, 2).reshape(B * T1, 8 * C, S // 2, S // 2)
    l1 = wavelet_l1(frames[:, 0:C])                              // [B*T1, 4C, S/4, S/4]
    l1v = l1.reshape(B, T1, 4 * C, S // 4, S // 4).transpose(1, 2)
    l2 = wavelet_l2(l1v[:, 0:C])                                 // [B, 8C, T2, S/8, S/8]
    moments = encoder(coeffs, l1, l2)                            // [B, 2 latent, T2, S/8, S/8]
    mu = moments[:, 0:latent]
    lv = moments[:, latent:] + logvar_init
    // clamped to [-30, 20] as the reference's DiagonalGaussianDistribution
    // (exact inside: each relu is 0 there; gradient 0 outside)
    logvar = lv - relu(lv - 20.0) + relu((lv + 30.0) * -1.0)
    z = mu + exp(logvar * 0.5) * randn(B, latent, T2, S // 8, S // 8)
    m = decoder.mid(z)
    dl2 = decoder.l2(m)
    u = decoder.up(m)
    dl1 = decoder.l1(u, dl2)
    rec = wavelet_out(decoder.coeffs(u, dl1))
    let cells = C * F * S * S
    let d = video - rec
    nll = mean(abs(d)) * (cells / F)
    if loss_type == "l2" {
      nll = mean(d * d) * (cells / F)
    }
    kl = mean(mu * mu + exp(logvar) - 1.0 - logvar) * (0.5 * latent * T2 * (S // 8) * (S // 8))
    wl = mean(abs(l1v - dl1)) * (4 * C * T1 * (S // 4) * (S // 4)) + mean(abs(l2 - dl2)) * (8 * C * T2 * (S // 8) * (S // 8))
    loss = nll + kl * kl_weight + wl * wavelet_weight
    if gan {
      // LPIPSWithDiscriminator3D's hinge GAN: the generator's term -mean(D(x')),
      // the discriminator's 0.5 (mean(relu(1 - D(x))) + mean(relu(1 + D(x')))) on
      // the detached reconstruction; the train section's gan setting weights the
      // first, starts both and gives each its own optimizer (passes/autodiff.c)
      g = mean(disc(rec)) * -1.0
      d = (mean(relu(1.0 - disc(video))) + mean(relu(1.0 + disc(detach(rec))))) * 0.5
      return [loss, g, d]
    }
    return loss
  }

  // the reconstruction forwards (lang/REFERENCE.md, "Reconstruction"): the
  // posterior's mean, and the clip decoded from latents
  forward encode(video: f32[B, C, F, S, S]) {
    let T1 = (F + 1) // 2
    coeffs = wavelet_in(video)
    frames = coeffs.transpose(1, 2).reshape(B * T1, 8 * C, S // 2, S // 2)
    l1 = wavelet_l1(frames[:, 0:C])
    l1v = l1.reshape(B, T1, 4 * C, S // 4, S // 4).transpose(1, 2)
    return encoder(coeffs, l1, wavelet_l2(l1v[:, 0:C]))[:, 0:latent]
  }
  forward decode(latents: f32[B, latent, (F - 1) // 4 + 1, S // 8, S // 8]) {
    m = decoder.mid(latents)
    u = decoder.up(m)
    return wavelet_out(decoder.coeffs(u, decoder.l1(u, decoder.l2(m))))
  }

  train {
    optimizer = adamw(lr = 1e-5, betas = [0.9, 0.999], weight_decay = 1e-4)
  }
}

// A tiny WF-VAE for 64x64 one-channel clips (the video task's
// f32[B, 1, 17, 64, 64]) that trains on two cores: base 16, energy flow 16,
// 1 ResNet block per level, layer norm, latent 4.
model WFVAETiny extends WFVAE {
  let B = 2
  let C = 1
  let F = 17
  let S = 64
  let latent = 4
  let base = 16
  let enc_energy_flow = 16
  let dec_energy_flow = 16
  let nres = 1
  let connect_res = 1

  data { format = clips_video }
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 1e-4)
  }
}

// The tiny WF-VAE that fits the video task's clips in 15 minutes on two
// cores (README, tools/wfvae.sh): WFVAETiny's structure at half its width
// (base 8 and energy flow 8, a quarter of WFVAETiny's FLOPs) but for the
// decoder's last stage, 16 wide (dec_tail: on oneDNN's AMX kernels 16
// channels cost 4.5% more step time than 8, and gave +0.2 dB at 10,500
// steps), with the published latent 8 (4x8x8 compression: a 17-frame
// 64x64 clip to 8 x 5 x 8 x 8), the log-variance starting at -20 (the
// posterior's noise std at 5e-5). Trained for the
// PSNR it is scored on: the reconstruction term is the squared error
// (loss_type "l2"; the L1 term left every run at the all-black output's
// 14.9 dB for ~300 steps, the mostly black clips' median) and the wavelet
// term is off; batch 2 as data parallel over two 1-thread ranks (dp = 2:
// batch-1 convolutions of 8 to 40 channels thread poorly, 1.25x on two
// threads), AdamW at 4e-3 (8e-3 diverged; at 10,500 steps 2.8e-3 gave
// 26.84 dB and 5.6e-3 26.51 against 4e-3's 27.0), warmup and a straight
// decay to 0 (10,500 steps: 27.24 dB against a cosine to 5e-5's 27.18),
// the gradient norm clipped at 1.0 (unclipped, a 9,000-step run diverged at
// step 3,035; 3,000-step proxies: 24.46 dB clipped against 24.15).
model WFVAEFit extends WFVAETiny {
  let B = 2
  let latent = 8
  let base = 8
  let enc_energy_flow = 8
  let dec_energy_flow = 8
  let dec_tail = 16
  let logvar_init = -20.0
  let loss_type = "l2"
  let wavelet_weight = 0.0

  train {
    optimizer = adamw(lr = 4e-3, betas = [0.9, 0.999], weight_decay = 1e-4, clip = 1.0)
    schedule = linear(warmup = 50, min_lr = 0)
  }
}

// ---- the adversarial option (off by default) ----

// BatchNorm3d in training mode (the reference discriminator's norm): each
// channel normalised over the batch, frames and positions, eps 1e-5, as a
// GroupNorm with one group per channel over [1, C, B*T*H*W].
module BatchNorm3d(ch: int) {
  weight = param f32[ch] = ones
  bias   = param f32[ch] = zeros

  forward(x: [B, ch, T, H, W]) {
    y = group_norm(x.transpose(0, 1).reshape(1, ch, B * T * H * W), weight, bias, groups = ch, eps = 1e-5)
    return y.reshape(ch, B, T, H, W).transpose(0, 1)
  }
}

// leaky ReLU, slope 0.2: x for x > 0, 0.2 x below; its gradient at 0 is
// 0.2, as PyTorch's (a clip's black background makes many exact zeros)
module LeakyReLU {
  forward(x) { return x * 0.2 + relu(x) * 0.8 }
}

// One NLayerDiscriminator3D layer: 3x3x3 conv (no bias: the norm has one),
// BatchNorm3d, leaky ReLU, dropout.
module DiscBlock3D(in_ch: int, out_ch: int, stride_t: int, stride: int, dropout: float) {
  conv = param f32[out_ch, in_ch, 3, 3, 3] = normal(0.02)
  norm = BatchNorm3d(out_ch)
  act  = LeakyReLU()

  forward(x: [B, in_ch, T, H, W]) {
    h = act(norm(conv3d(x, conv, stride = [stride_t, stride, stride], padding = 1)))
    if dropout > 0 {
      return dropout(h, dropout)
    }
    return h
  }
}

// The reference's NLayerDiscriminator3D (PKU-YuanGroup WF-VAE,
// causalvideovae/model/losses/discriminator.py; LPIPSWithDiscriminator3D's
// default 4 layers): a 3D PatchGAN over [B, C, T, H, W] giving one logit per
// patch, [B, 1, t, h, w]. conv 3x3x3 stride 2 + leaky ReLU; then n_layers - 1
// blocks doubling the width (at most 8 ndf), stride 2 in time only in the
// first; a stride-1 block; a 3x3x3 conv to one channel. Initialised as its
// weights_init: convolutions N(0, 0.02), norm weights 1 (the reference
// draws N(1, 0.02)), biases 0.
module Discriminator3D(in_ch: int = 3, ndf: int = 64, n_layers: int = 4, dropout: float = 0.3) {
  conv_in = Conv3d(in_ch, ndf, 3, stride = 2, padding = 1)
  act     = LeakyReLU()
  if n_layers >= 2 {
    block1 = DiscBlock3D(ndf, 2 * ndf, 2, 2, dropout)
  }
  if n_layers >= 3 {
    block2 = DiscBlock3D(2 * ndf, 4 * ndf, 1, 2, dropout)
  }
  if n_layers >= 4 {
    block3 = DiscBlock3D(4 * ndf, 8 * ndf, 1, 2, dropout)
  }
  let w_in = min(int(2 ** (n_layers - 1)), 8) * ndf
  let w_out = min(int(2 ** n_layers), 8) * ndf
  block_out = DiscBlock3D(w_in, w_out, 1, 1, dropout)
  conv_out  = Conv3d(w_out, 1, 3, padding = 1)

  forward(x: [B, in_ch, T, H, W]) {
    ok = require(n_layers >= 1 and n_layers <= 4, "Discriminator3D takes 1 to 4 layers")
    h = act(conv_in(x))
    if n_layers >= 2 {
      h = block1(h)
    }
    if n_layers >= 3 {
      h = block2(h)
    }
    if n_layers >= 4 {
      h = block3(h)
    }
    return conv_out(block_out(h))
  }
}

// WFVAETiny with the adversarial option on: a 2-layer discriminator of
// width 8 (no dropout), its generator term weighted 0.5 (the reference
// trainer's disc_weight default, as a fixed weight) from step 6 on.
model WFVAETinyGAN extends WFVAETiny {
  let gan = true
  let disc_ndf = 8
  let disc_layers = 2
  let disc_dropout = 0.0

  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], weight_decay = 1e-4)
    gan = gan(discriminator = disc, weight = 0.5, start = 5)
  }
}
