# a comment
print(1)
