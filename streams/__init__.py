"""Stream processing: the faust app and one folder per stage."""
