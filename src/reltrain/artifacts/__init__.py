"""The model folder and the checkpoint file: the only code that reads weights or names a
checkpoint's keys; everything it reads is a stranger's (docs/security.md)."""
