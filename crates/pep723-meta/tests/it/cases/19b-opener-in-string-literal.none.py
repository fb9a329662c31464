TEMPLATE = "# /// script"
OTHER = f"""
# /// script
"""
print(TEMPLATE)
