"""mcore.py: loads megatron-core's indexed_dataset module (the reference
reader and writer of Megatron's .bin/.idx) without importing the
megatron.core package.

The megatron-core wheel from PyPI needs torch >= 2.6; the test venv sees
Debian's python3-torch 1.13, with which `import megatron.core` fails (its
__init__ pulls in distributed code that needs newer torch). indexed_dataset.py
itself only needs numpy, torch.Tensor.numpy and three small helpers, so this
file registers the packages megatron, megatron.core and
megatron.core.datasets as bare packages over the installed wheel's folders
(their __init__.py files do not run), gives megatron.core.utils as the one
function the module takes from it (log_single_rank, from the wheel's own
megatron/core/_rank_utils.py), and loads the wheel's
megatron/core/datasets/indexed_dataset.py file with importlib, unchanged."""
import importlib.util
import os
import sys
import types


def _site_dir():
    for p in sys.path:
        if os.path.isfile(os.path.join(p, "megatron", "core", "datasets", "indexed_dataset.py")):
            return p
    raise SystemExit("megatron-core is not installed in this python (%s)" % sys.executable)


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load():
    root = os.path.join(_site_dir(), "megatron")
    for name, sub in (("megatron", ""), ("megatron.core", "core"),
                      ("megatron.core.datasets", "core/datasets")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, sub)]
        sys.modules[name] = pkg
    rank = _load_file("megatron.core._rank_utils", os.path.join(root, "core", "_rank_utils.py"))
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = rank.log_single_rank
    sys.modules["megatron.core.utils"] = utils
    return _load_file("megatron.core.datasets.indexed_dataset",
                      os.path.join(root, "core", "datasets", "indexed_dataset.py"))


if __name__ == "__main__":
    m = load()
    print(m.__file__, m._INDEX_HEADER, m.IndexedDataset, m.IndexedDatasetBuilder)
