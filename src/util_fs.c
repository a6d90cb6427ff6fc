// util_fs.c — file-system helpers shared by every file (declared in util.h):
// complete writes, whole-file reads, directories created and checked writable.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

// Both write loops: write(2) may write less than asked, or be interrupted.
static void write_loop(int fd, const void *buf, size_t bytes, uint64_t off, int positioned,
                       const char *path) {
    const char *p = buf;
    while (bytes > 0) {
        size_t want = bytes > ((size_t)1 << 30) ? ((size_t)1 << 30) : bytes;
        ssize_t put = positioned ? pwrite(fd, p, want, (off_t)off) : write(fd, p, want);
        if (put < 0) {
            if (errno == EINTR) continue;
            die_errno("%s: write of %zu bytes at offset %llu failed", path, want, (unsigned long long)off);
        }
        p += put;
        bytes -= (size_t)put;
        off += (uint64_t)put;
    }
}

void write_fully(int fd, const void *buf, size_t bytes, const char *path) {
    write_loop(fd, buf, bytes, 0, 0, path);
}

void pwrite_fully(int fd, const void *buf, size_t bytes, uint64_t off, const char *path) {
    write_loop(fd, buf, bytes, off, 1, path);
}

char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) != 0) die_errno("seek in %s failed", path);
    long sz = ftell(f);
    if (sz < 0) die_errno("ftell of %s failed", path);
    rewind(f);
    char *buf = xmalloc((size_t)sz + 1, path);  // (sz + 1) file text + NUL
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) die_errno("read of %s failed", path);
    buf[sz] = '\0';
    fclose(f);
    return buf;
}

void make_dirs(const char *path, const char *what) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) die("%s %s: path is too long", what, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die_errno("%s: cannot create directory %s", what, buf);
        *p = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) die("%s %s exists but is not a directory", what, path);
}

void check_writable_dir(const char *dir, const char *what) {
    make_dirs(dir, what);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.femtotron_write_test.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die_errno("%s %s is not writable (cannot create a file in it)", what, dir);
    int ok = write(fd, "ok\n", 3) == 3;
    int err = errno;
    close(fd);
    unlink(probe);
    errno = err;
    if (!ok) die_errno("%s %s: cannot write a file in it", what, dir);
}

void check_writable_file(const char *path, const char *what) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) die("%s %s: path is too long", what, path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        check_writable_dir(dir, what);
    } else {
        check_writable_dir(slash ? "/" : ".", what);
    }
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISDIR(st.st_mode) || access(path, W_OK) != 0))
        die("%s %s exists and cannot be written", what, path);
}

void copy_file_durable(const char *from, const char *to) {
    int in = open(from, O_RDONLY);
    if (in < 0) die_errno("cannot open %s", from);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) die_errno("cannot create %s", to);
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) write_fully(out, buf, (size_t)n, to);
    if (n < 0) die_errno("cannot read %s", from);
    if (fsync(out) != 0) die_errno("cannot fsync %s", to);
    close(in);
    if (close(out) != 0) die_errno("cannot close %s", to);
}

int path_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

double dir_file_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    double bytes = 0;
    char path[4096];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) bytes += (double)st.st_size;
    }
    closedir(d);
    return bytes;
}
