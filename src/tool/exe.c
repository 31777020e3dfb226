/* exe.c - reads just enough of an executable's headers to tell whether
 * vsocket can reach its sockets (see exe.h). No libelf: a few pread calls on
 * 64-bit little-endian ELF; anything else is "unknown" and judged by no one. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tool/exe.h"

/* Bounds against corrupt or hostile headers: real programs have a dozen
 * program headers, a few dozen sections and a few notes. */
#define MAX_PHDRS 4096
#define MAX_NOTES 1024
#define MAX_DYN 4096
#define MAX_SHSTRTAB (1 << 20)

static bool read_at(int fd, void *buf, size_t len, uint64_t off)
{
    if (off > (uint64_t)INT64_MAX - len)
        return false;
    return pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

static uint64_t align_up(uint64_t n, uint64_t align)
{
    return (n + align - 1) & ~(align - 1);
}

/* The standard Go toolchain writes a note owned by "Go" (the build ID, type
 * 4) into every binary it links, static or dynamic, in its own PT_NOTE
 * segment: found even when the section headers are stripped. */
static bool note_segment_has_go(int fd, const Elf64_Phdr *ph)
{
    uint64_t align = ph->p_align == 8 ? 8 : 4, off = 0;
    for (int i = 0; i < MAX_NOTES && off + sizeof(Elf64_Nhdr) <= ph->p_filesz; i++) {
        Elf64_Nhdr nh;
        if (!read_at(fd, &nh, sizeof(nh), ph->p_offset + off))
            return false;
        char name[4];
        if ((nh.n_namesz == 3 || nh.n_namesz == 4) &&
            read_at(fd, name, 3, ph->p_offset + off + sizeof(nh)) && memcmp(name, "Go", 3) == 0)
            return true;
        off += sizeof(nh) + align_up(nh.n_namesz, align) + align_up(nh.n_descsz, align);
    }
    return false;
}

/* Whether the dynamic section has a DT_SONAME: a shared object, not a
 * static-pie program (which has a dynamic section for its own relocation). */
static bool dynamic_has_soname(int fd, const Elf64_Phdr *ph)
{
    for (uint64_t i = 0; i < MAX_DYN && (i + 1) * sizeof(Elf64_Dyn) <= ph->p_filesz; i++) {
        Elf64_Dyn d;
        if (!read_at(fd, &d, sizeof(d), ph->p_offset + i * sizeof(d)) || d.d_tag == DT_NULL)
            return false;
        if (d.d_tag == DT_SONAME)
            return true;
    }
    return false;
}

static void read_interp(int fd, const Elf64_Phdr *ph, struct vs_exe *exe)
{
    size_t len = ph->p_filesz < sizeof(exe->interp) ? ph->p_filesz : sizeof(exe->interp) - 1;
    if (!read_at(fd, exe->interp, len, ph->p_offset))
        len = 0;
    exe->interp[len] = '\0';
    if (!exe->interp[0]) /* unreadable: still a loader, of unknown name */
        strcpy(exe->interp, "?");
}

struct elf_facts {
    bool interp, soname, go;
};

static int read_phdrs(int fd, const Elf64_Ehdr *eh, struct elf_facts *f, struct vs_exe *exe)
{
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum > MAX_PHDRS)
        return -1;
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        if (!read_at(fd, &ph, sizeof(ph), eh->e_phoff + (uint64_t)i * sizeof(ph)))
            return -1;
        if (ph.p_type == PT_INTERP && !f->interp) {
            f->interp = true;
            read_interp(fd, &ph, exe);
        } else if (ph.p_type == PT_NOTE && !f->go) {
            f->go = note_segment_has_go(fd, &ph);
        } else if (ph.p_type == PT_DYNAMIC) {
            f->soname = dynamic_has_soname(fd, &ph);
        }
    }
    return 0;
}

static char *read_alloc(int fd, uint64_t len, uint64_t off)
{
    char *buf = len ? malloc(len) : NULL;
    if (buf && !read_at(fd, buf, len, off)) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

/* Whether a section named NAME exists. Go 1.13+ puts its build information
 * in .go.buildinfo: this finds Go programs linked without a build ID note
 * (-ldflags=-buildid=, as reproducible builds do). */
static bool has_section(int fd, const Elf64_Ehdr *eh, const char *name)
{
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 ||
        eh->e_shnum >= SHN_LORESERVE || eh->e_shstrndx >= eh->e_shnum)
        return false;
    Elf64_Shdr *sh = (Elf64_Shdr *)read_alloc(fd, (uint64_t)eh->e_shnum * sizeof(*sh), eh->e_shoff);
    if (!sh)
        return false;
    const Elf64_Shdr *strtab = &sh[eh->e_shstrndx];
    uint64_t size = strtab->sh_size < MAX_SHSTRTAB ? strtab->sh_size : 0;
    char *names = read_alloc(fd, size, strtab->sh_offset);
    size_t want = strlen(name) + 1;
    bool found = false;
    for (unsigned i = 0; names && !found && i < eh->e_shnum; i++)
        found = sh[i].sh_name + want <= size && memcmp(names + sh[i].sh_name, name, want) == 0;
    free(names);
    free(sh);
    return found;
}

static bool elf64_le(const unsigned char *ident, struct vs_exe *exe)
{
    if (ident[EI_CLASS] != ELFCLASS64)
        exe->unknown = "an ELF file that is not 64-bit";
    else if (ident[EI_DATA] != ELFDATA2LSB)
        exe->unknown = "a big-endian ELF file";
    /* We read the headers as the host's own structures. */
    else if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
        exe->unknown = "an ELF file of the other byte order than this host's";
    else
        return true;
    return false;
}

static void inspect_elf(int fd, struct vs_exe *exe)
{
    Elf64_Ehdr eh;
    struct elf_facts f = {0};
    exe->unknown = "an ELF file too short for its header";
    if (!read_at(fd, &eh, sizeof(eh), 0) || !elf64_le(eh.e_ident, exe))
        return;
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) {
        exe->unknown = "an ELF file that is not an executable";
        return;
    }
    if (read_phdrs(fd, &eh, &f, exe) < 0) {
        exe->unknown = "an ELF file with unreadable program headers";
        return;
    }
    if (!f.go)
        f.go = has_section(fd, &eh, ".go.buildinfo");
    if (f.go)
        exe->kind = VS_EXE_GO;
    else if (f.interp)
        exe->kind = VS_EXE_DYNAMIC;
    else
        exe->kind = f.soname ? VS_EXE_LOADER : VS_EXE_STATIC;
}

/* The program a `#!/usr/bin/env NAME` line runs: NAME (after -S, as in
 * `env -S NAME ARGS`), or NULL when env is given other options. */
static const char *env_target(char *arg)
{
    if (strncmp(arg, "-S", 2) == 0)
        arg += 2 + strspn(arg + 2, " \t");
    if (!*arg || *arg == '-')
        return NULL;
    arg[strcspn(arg, " \t")] = '\0';
    return arg;
}

/* A #! line: the interpreter, and the rest of the line (one argument, as
 * Linux passes it). The kernel reads at most 256 bytes of it. */
static void inspect_script(int fd, struct vs_exe *exe)
{
    char line[257];
    ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    char *interp = line + 2 + strspn(line + 2, " \t");
    char *arg = interp + strcspn(interp, " \t");
    if (*arg)
        *arg++ = '\0';
    arg += strspn(arg, " \t");
    const char *base = strrchr(interp, '/');
    exe->unknown = "a #! script whose interpreter cannot be found";
    if (strcmp(base ? base + 1 : interp, "env") == 0) {
        /* env looks its program up in PATH, which the script inherits from us. */
        const char *run = env_target(arg);
        if (run && vs_exe_resolve(run, exe->interp, sizeof(exe->interp)) == 0)
            exe->kind = VS_EXE_SCRIPT;
        return;
    }
    /* The kernel takes the interpreter as a path, relative to the working
     * directory if it has no slash: never from PATH. */
    snprintf(exe->interp, sizeof(exe->interp), "%s", interp);
    if (*interp && access(interp, X_OK) == 0)
        exe->kind = VS_EXE_SCRIPT;
}

int vs_exe_inspect(const char *path, struct vs_exe *exe)
{
    memset(exe, 0, sizeof(*exe));
    exe->unknown = "neither an ELF file nor a #! script";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    unsigned char magic[SELFMAG] = {0};
    if (fstat(fd, &st) < 0 || pread(fd, magic, SELFMAG, 0) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    exe->setid = (st.st_mode & (S_ISUID | S_ISGID)) != 0;
    exe->file_caps = fgetxattr(fd, "security.capability", NULL, 0) > 0;
    /* The kernel's rule (secureexec): the new image's effective ids differ
     * from its real ones, or it gains capabilities (root's are all there). */
    exe->secure = ((st.st_mode & S_ISUID) && st.st_uid != getuid()) ||
                  ((st.st_mode & S_ISGID) && st.st_gid != getgid()) ||
                  (exe->file_caps && getuid() != 0);
    if (memcmp(magic, ELFMAG, SELFMAG) == 0)
        inspect_elf(fd, exe);
    else if (memcmp(magic, "#!", 2) == 0)
        inspect_script(fd, exe);
    close(fd);
    if (exe->kind != VS_EXE_UNKNOWN)
        exe->unknown = NULL;
    return 0;
}

const char *vs_exe_unseen_reason(enum vs_exe_kind kind)
{
    switch (kind) {
    case VS_EXE_GO:
        return "is a Go program: it makes system calls without libc, so vsocket cannot see its "
               "sockets";
    case VS_EXE_STATIC:
        return "is statically linked: it has no dynamic loader to load vsocket (LD_PRELOAD), so "
               "vsocket cannot see its sockets";
    default:
        return NULL;
    }
}

int vs_exe_resolve(const char *program, char *out, size_t outlen)
{
    if (strchr(program, '/')) {
        snprintf(out, outlen, "%s", program);
        if (access(out, F_OK) < 0)
            return -1;
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int saw_eacces = 0;
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(out, outlen, "%.*s%s%s", (int)len, p, len ? "/" : "", program);
        struct stat st;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(out, X_OK) == 0)
                return 0;
            saw_eacces = 1;
        }
        p += len + (p[len] == ':');
    }
    errno = saw_eacces ? EACCES : ENOENT;
    return -1;
}
