#!/usr/bin/python3
"""The parameter count of PKU-YuanGroup's WF-VAE (the reference code itself,
not a re-implementation): imports causalvideovae/model/vae/modeling_wfvae.py
from a checkout of github.com/PKU-YuanGroup/WF-VAE (commit d858bee was used
for tests/wfvae.sh's numbers) and instantiates WFVAEModel at the published
configurations. The code needs diffusers and einops only for decorators,
base classes and forward passes, none for construction: they are replaced by
empty stand-ins here, so only torch is needed.
Usage: wfvae_refcount.py WF-VAE-CHECKOUT
Prints trainable parameters (all, encoder, decoder) and the frozen ones."""
import importlib, os, sys, tempfile, types

root = os.path.abspath(sys.argv[1])
stubs = tempfile.mkdtemp()
files = {
    "einops/__init__.py": "def rearrange(*a, **k):\n    raise NotImplementedError\npack = unpack = rearrange\n",
    "diffusers/__init__.py": "import torch\nclass ModelMixin(torch.nn.Module):\n    pass\n"
                             "from .configuration_utils import ConfigMixin\n",
    "diffusers/configuration_utils.py": "class ConfigMixin:\n    pass\ndef register_to_config(f):\n    return f\n",
    "diffusers/utils.py": "class BaseOutput(dict):\n    pass\n",
    "diffusers/models/__init__.py": "",
    "diffusers/models/modeling_utils.py": "from .. import ModelMixin\n",
}
for name, text in files.items():
    os.makedirs(os.path.dirname(os.path.join(stubs, name)), exist_ok=True)
    with open(os.path.join(stubs, name), "w") as f:
        f.write(text)
sys.path[:0] = [stubs, root]
import torch  # noqa: E402

# the package __init__ files import the training code too: load the model package alone
for name, path in (("causalvideovae", "causalvideovae"), ("causalvideovae.model", "causalvideovae/model")):
    m = types.ModuleType(name)
    m.__path__ = [os.path.join(root, path)]
    sys.modules[name] = m
mw = importlib.import_module("causalvideovae.model.vae.modeling_wfvae")
CONFIGS = {  # name: (encoder energy flow, decoder connection ResNet blocks)
    "WFVAE (MindSpeed-MM OSP1.3: enc energy flow 64, connect_res_layer_num 2)": (64, 2),
    "WFVAE (Open-Sora-Plan wfvae json at latent 8: enc energy flow 128, connect_res_layer_num 1)": (128, 1),
}
for label, (eef, conn) in CONFIGS.items():
    net = mw.WFVAEModel(latent_dim=8, base_channels=128, encoder_num_resblocks=2, decoder_num_resblocks=2,
                        encoder_energy_flow_hidden_size=eef, decoder_energy_flow_hidden_size=128,
                        connect_res_layer_num=conn, use_attention=True, norm_type="groupnorm",
                        t_interpolation="trilinear")
    n = lambda mod, tr=True: sum(p.numel() for p in mod.parameters() if p.requires_grad == tr)
    print("%s: trainable %d (encoder %d, decoder %d), frozen %d (the Haar filters)" %
          (label, n(net), n(net.encoder), n(net.decoder), n(net, False)))
