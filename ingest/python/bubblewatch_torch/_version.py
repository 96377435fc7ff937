"""The package version: bubblewatch's, from project(VERSION) in the top-level
CMakeLists.txt. Kept equal by tests/ingest/python (test_bubblewatch_torch.py,
VersionTest; pip_install_test.sh checks what pip installed)."""

__version__ = "0.1.0"
