# /// scripts
# dependencies = []

# /// script
# dependencies = ["rich"]
# ///
