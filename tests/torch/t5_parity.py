#!/usr/bin/python3
"""parity.py for the models of stdlib_models/t5.mm and videodit.mm: their
references (t5ref.py, videoditref.py) added to mmref.MODELS, then parity.py's
main (same arguments)."""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmref, parity, t5ref

mmref.MODELS["T5Tiny"] = t5ref.t5_tiny
try:
    import videoditref
    mmref.MODELS.update(videoditref.MODELS)
except ImportError:
    pass

if __name__ == "__main__":
    sys.exit(parity.main())
