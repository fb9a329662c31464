# /// script
# dependencies = ["rich"]
# ///
