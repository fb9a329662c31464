# /// script
# dependencies = [
#     "anyio"  # async
# ]
# ///
