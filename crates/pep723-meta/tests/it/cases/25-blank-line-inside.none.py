# /// script
# dependencies = [
#   "rich",

# ]
# ///
