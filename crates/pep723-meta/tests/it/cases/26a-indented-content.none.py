# /// script
# dependencies = [
  #   "rich",
# ]
# ///
