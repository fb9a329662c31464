# /// script
# dependencies = ["rich"]
