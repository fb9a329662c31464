# /// script
# dependencies = [
#     "rich",
# ]
# ///