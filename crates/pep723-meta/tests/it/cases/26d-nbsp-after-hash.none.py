# /// script
# dependencies = ["rich"]
# ///
