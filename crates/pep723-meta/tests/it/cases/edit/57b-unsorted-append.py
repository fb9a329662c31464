# /// script
# dependencies = [
#     "rich",
#     "anyio",
# ]
# ///
