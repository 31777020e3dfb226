#!/usr/bin/env python3
"""Writes vsocket's man pages from the texts they would otherwise repeat.

    mkman.py tool VSOCKET_BINARY OUT      vsocket(1): `vsocket help` and each
                                          command's --help, as the tool prints them
    mkman.py config CONFIGURATION_MD OUT  vsocket(7): what the library does, and
                                          docs/configuration.md (every VSOCKET_*
                                          variable) as its ENVIRONMENT section

Generated at build time so that a man page can never disagree with the tool's
help or with the configuration reference.
"""
import re
import subprocess
import sys

DATE = "2026"
SOURCE = "vsocket"


def esc(text):
    """Plain text to roff: backslashes, hyphens, and lines a roff reader would
    take for requests."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    # Pages stay ASCII: not every man reader passes UTF-8 through preconv.
    text = "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)
    return "\n".join("\\&" + ln if ln.startswith((".", "'")) else ln for ln in text.split("\n"))


def inline_md(text):
    """Markdown spans of docs/configuration.md to roff fonts."""
    out = []
    for part in re.split(r"(`[^`]*`)", text):
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append("\\fB" + esc(part[1:-1]) + "\\fR")
            continue
        # A link to another page of docs/ reads as its name; SEE ALSO says where.
        part = re.sub(r"\[([^\]]*\.md)\]\([^)]*\)", r"docs/\1", part)
        part = re.sub(r"\[([^\]]*)\]\(([^)#]*)[^)]*\)", r"\1 (docs/\2)", part)
        part = esc(part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", part)
        out.append(part)
    return "".join(out)


def preformatted(text):
    return ".nf\n" + esc(text.rstrip("\n")) + "\n.fi\n"


def header(section, title):
    return f'.TH VSOCKET {section} "{DATE}" "{SOURCE}" "{title}"\n'


# ------------------------------------------------------------------ vsocket(1)

def help_text(tool, *args):
    run = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
    return run.stdout or run.stderr


def tool_page(tool):
    main = help_text(tool, "help")
    commands = re.findall(r"^  (\w+) ", main.split("Commands:")[1].split("\n\n")[0], re.M)
    page = [header(1, "User Commands"),
            ".SH NAME\nvsocket \\- run programs with vsocket, show what it did, check the host\n",
            ".SH SYNOPSIS\n"]
    for cmd in commands:
        page.append(f".B vsocket {cmd}\n.br\n")
    page.append(".SH DESCRIPTION\n"
                "The command-line tool of vsocket (see \\fBvsocket\\fR(7)), the library that "
                "carries the TCP traffic of unmodified programs over shared memory within a "
                "host and RDMA between hosts.\n.PP\n")
    page.append(preformatted(main))
    page.append(".SH COMMANDS\n")
    for cmd in commands:
        text = help_text(tool, "help", cmd)
        if text.startswith("usage: vsocket " + cmd):
            page.append(f".SS {cmd}\n" + preformatted(text))
    page.append(".SH ENVIRONMENT\nThe VSOCKET_* variables: \\fBvsocket\\fR(7).\n"
                ".SH SEE ALSO\n\\fBvsocket\\fR(7), \\fBld.so\\fR(8)\n")
    return "".join(page)


# ------------------------------------------------------------------ vsocket(7)

DESCRIPTION_7 = r""".SH NAME
vsocket \- TCP over shared memory and RDMA for unmodified socket programs
.SH SYNOPSIS
.B LD_PRELOAD=libvsocket.so
.I program
.br
.B vsocket run \-\-
.I program
.SH DESCRIPTION
vsocket is a library loaded into a program with
.BR LD_PRELOAD .
A TCP connection starts on the kernel, as always. When both ends run vsocket,
the connection moves, without losing or reordering a byte, to shared-memory
rings (both ends on this host) or to an RDMA RC queue pair (between hosts);
the program keeps its descriptors, errors, blocking behaviour,
.BR poll ,
.BR select ,
.BR epoll ,
.BR fork
and
.BR exec .
A peer without vsocket, a missing device, a limit or a failed set-up leaves
the connection on the kernel, with a reason that
.B vsocket stat
shows; so does anything vsocket cannot carry exactly as the kernel would.
.PP
.B vsocket doctor
says what this host offers (RDMA devices, GIDs, device access, locked-memory
limit) and what is missing.
"""


NOTES_7 = r""".SH NOTES
Set-user-ID, set-group-ID and file-capability programs run in the loader's
secure-execution mode, which ignores
.B LD_PRELOAD
entries with a slash and preloads a bare name only from the standard search
directories, and only if the file has the set-user-ID bit (see
.BR ld.so (8)).
Such programs therefore run without vsocket unless an administrator sets that
bit on the installed library (or lists it in
.IR /etc/ld.so.preload ),
which lets any user load vsocket into any such program. There vsocket ignores
.B VSOCKET_LOG_FILE
and
.BR VSOCKET_STATS_DIR ,
paths that would come from the unprivileged caller. README.md in the source
tree, "Set-user-ID and capability programs", says what each choice means.
"""


def config_page(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    page = [header(7, "Miscellaneous"), DESCRIPTION_7, ".SH ENVIRONMENT\n"]
    i = 0
    if lines and lines[0].startswith("# "):
        i = 1
    para = []

    def flush():
        if para:
            page.append(".PP\n" + inline_md(" ".join(para)) + "\n")
            para.clear()

    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            page.append(".PP\n" + preformatted("\n".join(lines[i + 1:j])))
            i = j + 1
            continue
        if ln.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = lines[i].strip().strip("|").split(" | ")
                rows.append([c.strip().replace("\\|", "|") for c in cells])
                i += 1
            for row in rows[2:]:  # header and separator
                name, values, default, meaning = row
                page.append(".TP\n" + inline_md(name) + "\n" + inline_md(meaning) + "\n"
                            ".RS\n.PP\nValues: " + inline_md(values) + ".\n.br\n"
                            "Default: " + inline_md(default) + ".\n.RE\n")
            continue
        if not ln.strip():
            flush()
        else:
            para.append(ln.strip())
        i += 1
    flush()
    page.append(NOTES_7)
    page.append(".SH FILES\n.TP\n.I $VSOCKET_STATS_DIR/vsocket\\-stats.PID\n"
                "Each process's socket statistics, read by \\fBvsocket stat\\fR.\n"
                ".SH SEE ALSO\n\\fBvsocket\\fR(1), \\fBld.so\\fR(8), \\fBrdma_cm\\fR(7); "
                "docs/ in the source tree: configuration.md, doctor.md, statistics.md, "
                "interposition.md, design/.\n")
    return "".join(page)


def main(argv):
    if len(argv) != 4 or argv[1] not in ("tool", "config"):
        sys.stderr.write(__doc__)
        return 2
    page = tool_page(argv[2]) if argv[1] == "tool" else config_page(argv[2])
    with open(argv[3], "w", encoding="utf-8") as out:
        out.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
