"""The model folder (what a checkpoint and an export both are) and a checkpoint's training state:
the only code that reads weights or names a checkpoint's keys; everything it reads is a
stranger's (docs/security.md)."""
