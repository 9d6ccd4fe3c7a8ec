"""Print the N-th (1-based) fenced command of the README's "Set up" section: .ci/run runs the second."""
import re
import sys
from pathlib import Path

readme = Path(__file__).resolve().parents[1] / "README.md"
section = re.search(r"^## Set up\n(.*?)(?=^## )", readme.read_text(), re.S | re.M).group(1)
commands = re.findall(r"```bash\n(.*?)\n```", section, re.S)
print(commands[int(sys.argv[1]) - 1].strip())
