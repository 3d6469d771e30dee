"""Text handling shared by the stages and the rules stand-in: words and tokens (English and
Chinese), titles and tags, the lexicon of subjects and negations, and term overlap."""
