print(1)
# /// script
# dependencies = ["rich"]
# ///