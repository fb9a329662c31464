# /// script
# dependencies = [3, "rich"]
# ///
