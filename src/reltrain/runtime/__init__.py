"""What every layer runs on: errors a user can fix, output files written atomically, logs,
stop signals, child processes, and the one rank-aware module (distributed) with the launcher
and precision. Nothing here imports another folder of reltrain."""
