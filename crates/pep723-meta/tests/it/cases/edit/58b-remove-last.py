# /// script
# dependencies = [
#     "rich",
# ]
# ///
