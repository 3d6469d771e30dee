"""``memstream ui``: a small local web page to browse one cube's memory."""
