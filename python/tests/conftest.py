"""Fixtures of the engram_store tests (cluster.py): a generated table, imported into 3
shard directories with engramctl and served by 3 real engram-shard processes
on 127.0.0.1 (ports chosen by the kernel).

Environment (python/CMakeLists.txt sets it for ctest):
  ENGRAM_STORE_MODULE_DIR  the directory holding the built module
  ENGRAM_BIN_DIR           engram-shard and engramctl (default build/bin)
  ENGRAM_GOLDEN_DIR        tests/golden
  ENGRAM_EXAMPLES_DIR      examples/
"""
import os
import sys

import pytest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree (examples/)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("ENGRAM_BIN_DIR", os.path.join(ROOT, "build", "bin"))
GOLDEN_DIR = os.environ.get("ENGRAM_GOLDEN_DIR", os.path.join(ROOT, "tests", "golden"))
EXAMPLES_DIR = os.environ.get("ENGRAM_EXAMPLES_DIR", os.path.join(ROOT, "examples"))
if os.environ.get("ENGRAM_STORE_MODULE_DIR"):
    sys.path.insert(0, os.environ["ENGRAM_STORE_MODULE_DIR"])
sys.path.insert(0, EXAMPLES_DIR)
from cluster import Cluster  # noqa: E402



@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("engram")), BIN_DIR)
    yield c
    c.stop()


@pytest.fixture(scope="session")
def client(cluster):
    import engram_store
    return engram_store.Client(cluster.table, cluster.shards)


@pytest.fixture(scope="session")
def table(cluster):
    import torch_engram_layer
    return torch_engram_layer.TableFile(cluster.table)
