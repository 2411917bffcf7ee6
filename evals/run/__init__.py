"""Stage 5, run: replays cases through the arms unit by unit (local threads or Ray), checks each write, streams the record."""
