"""Test-wide setup: keep litellm offline so no test reaches the network for its cost map."""

import os

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
