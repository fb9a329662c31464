"""Plain computation: the interpreter starts, stdout comes back, the exit code is 0."""
import hashlib

print(f"sum-of-squares: {sum(i * i for i in range(1000))}")
print(f"sha256: {hashlib.sha256(b'python-sandbox').hexdigest()[:16]}")
print(f"python: {sys.version_info[0]}.{sys.version_info[1]}")
done()
