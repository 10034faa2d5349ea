"""WF-VAE in PyTorch, written from PKU-YuanGroup's modeling_wfvae.py (and its
modules: resnet_block.py, updownsample.py, attention.py, wavelet.py,
normalize.py, conv.py) with the reference's own operations (F.conv2d /
F.conv3d with the Haar filters at +-0.3536 and +-1/2, conv_transpose for the
inverses, F.interpolate, GroupNorm, softmax attention), keyed by mmc's
parameter names (stdlib_models/wfvae.mm), for the parity tests. The loss is
the reference's LPIPSWithDiscriminator3D generator loss without the
perceptual and GAN terms. The reparameterisation noise is the trainer's:
Philox4x32-10 of (run seed, stream "randn/0" mixed with the step), written
here in numpy from the Random123 definition, independently of
runtime/core/mmrt_rng.c."""
import math

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- the trainer's noise
M32 = 0xFFFFFFFF


def philox4x32(k0, k1, c0, c1, c2, c3):
    """Philox4x32-10 on uint64 arrays holding 32-bit words."""
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(M32)
            k1 = (k1 + np.uint64(0xBB67AE85)) & np.uint64(M32)
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & np.uint64(M32),
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & np.uint64(M32))
    return c0, c1, c2, c3


def stream_id(name, step):
    """64-bit FNV-1a of the name, then of the step's 8 bytes (little end first)."""
    h = 0xcbf29ce484222325
    for b in name.encode() + int(step).to_bytes(8, "little"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def randn(shape, seed, step, site=0):
    """Element i: word i % 4 of block i // 4 (counter = (block, stream), key =
    seed), Box-Muller on the word pairs (0, 1) and (2, 3)."""
    n = int(np.prod(shape))
    nb = (n + 3) // 4
    s = stream_id("randn/%d" % site, step)
    b = np.arange(nb, dtype=np.uint64)
    w = philox4x32(seed & M32, seed >> 32, b & np.uint64(M32), b >> np.uint64(32),
                   np.full(nb, s & M32, np.uint64), np.full(nb, s >> 32, np.uint64))
    z = np.empty((nb, 4), np.float64)
    for p in range(2):
        u1 = ((w[2 * p] >> np.uint64(8)).astype(np.float64) + 1.0) * 2.0 ** -24
        u2 = (w[2 * p + 1] >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
        r, th = np.sqrt(-2.0 * np.log(u1)), 2 * math.pi * u2
        z[:, 2 * p], z[:, 2 * p + 1] = r * np.cos(th), r * np.sin(th)
    return torch.tensor(z.reshape(-1)[:n].astype(np.float32).reshape(shape))


# ---------------------------------------------------------------- wavelets (wavelet.py)
def _filters3d():
    base = {
        "h": [[[1, 1], [1, 1]], [[1, 1], [1, 1]]], "g": [[[1, -1], [1, -1]], [[1, -1], [1, -1]]],
        "hh": [[[1, 1], [-1, -1]], [[1, 1], [-1, -1]]], "gh": [[[1, -1], [-1, 1]], [[1, -1], [-1, 1]]],
        "h_v": [[[1, 1], [1, 1]], [[-1, -1], [-1, -1]]], "g_v": [[[1, -1], [1, -1]], [[-1, 1], [-1, 1]]],
        "hh_v": [[[1, 1], [-1, -1]], [[-1, -1], [1, 1]]], "gh_v": [[[1, -1], [-1, 1]], [[-1, 1], [1, -1]]],
    }
    return [torch.tensor(base[k], dtype=torch.float32).view(1, 1, 2, 2, 2) * 0.3536
            for k in ("h", "g", "hh", "gh", "h_v", "g_v", "hh_v", "gh_v")]


F3 = _filters3d()
F2 = [torch.tensor(k, dtype=torch.float32).view(1, 1, 2, 2) / 2
      for k in ([[1, 1], [1, 1]], [[1, 1], [-1, -1]], [[1, -1], [1, -1]], [[1, -1], [-1, 1]])]


def haar3d(x):  # HaarWaveletTransform3D: causal (first frame padded), band-major
    b, c = x.shape[:2]
    y = x.reshape(b * c, 1, *x.shape[2:])
    y = torch.cat([y[:, :, :1], y], dim=2)
    outs = [F.conv3d(y, f.to(y.dtype), stride=2) for f in F3]
    return torch.cat([o.reshape(b, c, *o.shape[2:]) for o in outs], dim=1)


def ihaar3d(c):  # InverseHaarWaveletTransform3D
    b = c.shape[0]
    parts = c.chunk(8, dim=1)
    ch = parts[0].shape[1]
    rec = sum(F.conv_transpose3d(p.reshape(b * ch, 1, *p.shape[2:]), f.to(p.dtype), stride=2) for p, f in zip(parts, F3))
    rec = rec[:, :, 1:]
    return rec.reshape(b, ch, *rec.shape[2:])


def haar2d(x):  # HaarWaveletTransform2D on frames [N, C, H, W]
    n, c, h, w = x.shape
    y = x.reshape(n * c, 1, h, w)
    return torch.cat([F.conv2d(y, f.to(y.dtype), stride=2).reshape(n, c, h // 2, w // 2) for f in F2], dim=1)


def ihaar2d(c):
    parts = c.chunk(4, dim=1)
    n, ch, h, w = parts[0].shape
    rec = sum(F.conv_transpose2d(p.reshape(n * ch, 1, h, w), f.to(p.dtype), stride=2) for p, f in zip(parts, F2))
    return rec.reshape(n, ch, 2 * h, 2 * w)


def to_frames(x):  # video_to_image: b c t h w -> (b t) c h w
    b, c, t, h, w = x.shape
    return x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w), t


def to_video(y, t):
    bt, c, h, w = y.shape
    return y.reshape(bt // t, t, c, h, w).permute(0, 2, 1, 3, 4)


# ---------------------------------------------------------------- layers
class Net:
    def __init__(self, P, groups):
        self.P, self.groups = P, groups

    def conv2d(self, name, x, stride=1, padding=None):
        w = self.P[name + ".weight"]
        pad = w.shape[-1] // 2 if padding is None else padding
        return F.conv2d(x, w, self.P[name + ".bias"], stride=stride, padding=pad)

    def frame_conv2d(self, name, x):  # Conv2d under video_to_image
        f, t = to_frames(x)
        return to_video(self.conv2d(name, f), t)

    def causal_conv3d(self, name, x, stride=1, padding=None):  # CausalConv3d
        w = self.P[name + ".weight"]
        k = w.shape[2]
        pad = k // 2 if padding is None else padding
        if k > 1:
            x = torch.cat([x[:, :, :1].repeat(1, 1, k - 1, 1, 1), x], dim=2)
        return F.conv3d(x, w, self.P[name + ".bias"], stride=stride, padding=(0, pad, pad))

    def norm(self, name, x):  # Normalize, eps 1e-6: GroupNorm(groups), or (groups 0) the LayerNorm class
        w, b = self.P[name + ".weight"], self.P[name + ".bias"]
        if self.groups:
            return F.group_norm(x, self.groups, w, b, 1e-6)
        if x.dim() == 5:  # rearrange b c t h w -> b t h w c, LayerNorm(C), back
            return F.layer_norm(x.permute(0, 2, 3, 4, 1), (x.shape[1],), w, b, 1e-6).permute(0, 4, 1, 2, 3)
        return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b, 1e-6).permute(0, 3, 1, 2)

    def res2d(self, name, x):  # ResnetBlock2D (frames)
        h = self.conv2d(name + ".conv1", F.silu(self.norm(name + ".norm1", x)))
        h = self.conv2d(name + ".conv2", F.silu(self.norm(name + ".norm2", h)))
        if name + ".nin_shortcut.weight" in self.P:
            x = self.conv2d(name + ".nin_shortcut", x)
        return x + h

    def res3d(self, name, x):  # ResnetBlock3D
        h = self.causal_conv3d(name + ".conv1", F.silu(self.norm(name + ".norm1", x)))
        h = self.causal_conv3d(name + ".conv2", F.silu(self.norm(name + ".norm2", h)))
        if name + ".nin_shortcut.weight" in self.P:
            x = self.causal_conv3d(name + ".nin_shortcut", x)
        return x + h

    def attn(self, name, x):  # AttnBlock3DFix (softmax attention: torch 1.13 has no SDPA)
        h = self.norm(name + ".norm", x)
        q, k, v = (self.causal_conv3d(name + "." + s, h) for s in "qkv")
        b, c, t, hh, ww = q.shape
        q, k, v = (z.permute(0, 2, 3, 4, 1).reshape(b * t, hh * ww, c) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(c), dim=-1) @ v
        a = a.reshape(b, t, hh, ww, c).permute(0, 4, 1, 2, 3)
        return x + self.causal_conv3d(name + ".proj_out", a)

    def stack(self, name, fn, x):
        i = 0
        while name + ".%d.norm1.weight" % i in self.P:
            x = fn(name + ".%d" % i, x)
            i += 1
        return x

    def downsample(self, name, x):  # Downsample (frames): pad (0, 1, 0, 1), conv stride 2
        return self.conv2d(name + ".conv", F.pad(x, (0, 1, 0, 1)), stride=2, padding=0)

    def upsample(self, name, x):  # Upsample: nearest 2x, conv (frames of a video)
        f, t = to_frames(x)
        return to_video(self.conv2d(name + ".conv", F.interpolate(f, scale_factor=2.0, mode="nearest")), t)

    def down3d(self, name, x):  # Spatial2xTime2x3DDownsample
        return self.causal_conv3d(name + ".conv", F.pad(x, (0, 1, 0, 1, 0, 0)), stride=2, padding=0)

    def up3d(self, name, x, t_interpolation):  # Spatial2xTime2x3DUpsample, not cached
        if x.size(2) == 1:
            x = F.interpolate(x, scale_factor=(1, 2, 2), mode="trilinear")
        else:
            x, x_ = x[:, :, :1], x[:, :, 1:]
            x_ = F.interpolate(x_, scale_factor=(2, 1, 1), mode=t_interpolation)
            x_ = F.interpolate(x_, scale_factor=(1, 2, 2), mode="trilinear")
            x = F.interpolate(x, scale_factor=(1, 2, 2), mode="trilinear")
            x = torch.cat([x, x_], dim=2)
        return self.causal_conv3d(name + ".conv", x)


def encode(net, x, C, latent):
    """Encoder.forward: the moments, and the encoder's (l1, l2) coefficients."""
    coeffs = haar3d(x)
    frames, t1 = to_frames(coeffs)
    l1f = haar2d(frames[:, :C])
    l1_coeffs = to_video(l1f, t1)
    l1 = net.conv2d("encoder.connect_l1", l1f)
    l2_coeffs = haar3d(l1_coeffs[:, :C])
    l2 = net.frame_conv2d("encoder.connect_l2", l2_coeffs)
    h = net.conv2d("encoder.down1.conv_in", frames)
    h = net.stack("encoder.down1.res", net.res2d, h)
    h = net.downsample("encoder.down1.down", h)
    h = to_video(torch.cat([h, l1], dim=1), t1)
    h = net.frame_conv2d("encoder.down2.conv_in", h)
    h = net.stack("encoder.down2.res", net.res3d, h)
    h = net.down3d("encoder.down2.down", h)
    h = torch.cat([h, l2], dim=1)
    h = net.res3d("encoder.mid0", h)
    if "encoder.mid_attn.q.weight" in net.P:
        h = net.attn("encoder.mid_attn", h)
    h = net.res3d("encoder.mid1", h)
    h = net.causal_conv3d("encoder.conv_out", F.silu(net.norm("encoder.norm_out", h)))
    return h, (l1_coeffs, l2_coeffs)


def decode(net, z, C, base, t_interpolation):
    """Decoder.forward: the clip, and the decoder's (l1, l2) coefficients."""
    h = net.causal_conv3d("decoder.conv_in", z)
    h = net.res3d("decoder.mid0", h)
    if "decoder.mid_attn.q.weight" in net.P:
        h = net.attn("decoder.mid_attn", h)
    h = net.res3d("decoder.mid1", h)
    l2_coeffs = net.frame_conv2d("decoder.connect_l2.conv",
                                 net.stack("decoder.connect_l2.res", net.res3d, h[:, 4 * base:]))
    l2 = ihaar3d(l2_coeffs)
    h = h[:, :4 * base]
    h = net.stack("decoder.up2.res", net.res3d, h)
    h = net.up3d("decoder.up2.up", h, t_interpolation)
    h = net.res3d("decoder.up2.res_out", h)
    l1_coeffs = net.frame_conv2d("decoder.connect_l1.conv",
                                 net.stack("decoder.connect_l1.res", net.res3d, h[:, 4 * base:]))
    l1_coeffs = torch.cat([l1_coeffs[:, :C] + l2, l1_coeffs[:, C:]], dim=1)  # l1_coeffs[:, :3] += l2
    f, t1 = to_frames(l1_coeffs)
    l1 = to_video(ihaar2d(f), t1)
    h = h[:, :4 * base]
    h = net.res3d("decoder.up1.res0", h)
    h = net.stack("decoder.up1.res", net.res3d, h)
    h = net.upsample("decoder.up1.up", h)
    h = net.res3d("decoder.up1.res_out", h)
    h = net.res3d("decoder.layer0", h)
    h = net.res3d("decoder.layer1", h)
    h = net.frame_conv2d("decoder.conv_out", F.silu(net.norm("decoder.norm_out", h)))
    h = torch.cat([h[:, :C] + l1, h[:, C:]], dim=1)  # h[:, :3] += l1
    return ihaar3d(h), (l1_coeffs, l2_coeffs)


def l1(x, y):
    return torch.abs(x - y)


def wfvae_loss(P, video, noise, cfg):
    """WFVAEModel.forward + LPIPSWithDiscriminator3D (perceptual_weight 0, no
    discriminator, logvar 0): rec sum / (B T) + kl_weight KL sum / B +
    wavelet_weight (sum |l1 - l1'| + sum |l2 - l2'|) / B."""
    net = Net(P, cfg["groups"])
    C, latent = video.shape[1], cfg["latent"]
    moments, (el1, el2) = encode(net, video, C, latent)
    mean, logvar = torch.chunk(moments, 2, dim=1)  # DiagonalGaussianDistribution
    logvar = torch.clamp(logvar + cfg.get("logvar_init", 0.0), -30.0, 20.0)
    std, var = torch.exp(0.5 * logvar), torch.exp(logvar)
    z = mean + std * noise
    rec, (dl1, dl2) = decode(net, z, C, cfg["base"], cfg["t_interpolation"])
    bs, t = video.shape[0], video.shape[2]
    inputs = video.permute(0, 2, 1, 3, 4).reshape(bs * t, C, *video.shape[3:])
    recs = rec.permute(0, 2, 1, 3, 4).reshape(bs * t, C, *video.shape[3:])
    nll = torch.sum(l1(inputs, recs)) / (bs * t)
    kl = 0.5 * torch.sum(torch.pow(mean, 2) + var - 1.0 - logvar, dim=[1, 2, 3, 4])
    kl = torch.sum(kl) / kl.shape[0]
    wl = torch.sum(l1(el1, dl1)) / bs + torch.sum(l1(el2, dl2)) / bs
    if cfg.get("with_rec"):
        return nll + cfg["kl_weight"] * kl + cfg["wavelet_weight"] * wl, mean, rec
    return nll + cfg["kl_weight"] * kl + cfg["wavelet_weight"] * wl, mean


def leaky(x):
    return F.leaky_relu(x, 0.2)


def discriminator(P, x, prefix, n_layers):
    """NLayerDiscriminator3D (PKU-YuanGroup WF-VAE discriminator.py) in train mode, no dropout, as
    stdlib_models/wfvae.mm's Discriminator3D names its tensors: Conv3d(k 3, stride 2, pad 1) + LeakyReLU
    (0.2); n_layers - 1 blocks Conv3d (no bias; stride (2 if n == 1 else 1, 2, 2)) + BatchNorm3d (batch
    statistics, eps 1e-5) + LeakyReLU; a stride-1 block; Conv3d to one channel."""
    h = leaky(F.conv3d(x, P[prefix + "conv_in.weight"], P[prefix + "conv_in.bias"], stride=2, padding=1))
    blocks = [("block%d" % n, (2 if n == 1 else 1, 2, 2)) for n in range(1, n_layers)] + [("block_out", 1)]
    for name, stride in blocks:
        b = prefix + name + "."
        h = F.conv3d(h, P[b + "conv"], None, stride=stride, padding=1)
        h = leaky(F.batch_norm(h, None, None, P[b + "norm.weight"], P[b + "norm.bias"], training=True, eps=1e-5))
    return F.conv3d(h, P[prefix + "conv_out.weight"], P[prefix + "conv_out.bias"], padding=1)


def hinge_d_loss(logits_real, logits_fake):  # the reference's perceptual_loss.py
    return 0.5 * (torch.mean(F.relu(1.0 - logits_real)) + torch.mean(F.relu(1.0 + logits_fake)))
