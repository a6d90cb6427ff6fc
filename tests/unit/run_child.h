// tests/run_child.h — run a function in a fork()ed child with its stderr (or stdout)
// captured: the tests of fatal errors need it, because die() ends the process.
// Include after the test's feature macro (_GNU_SOURCE) and system headers.
#ifndef FEMTOTRON_RUN_CHILD_H
#define FEMTOTRON_RUN_CHILD_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

// Run fn(ctx) in a child with file descriptor fd (1 stdout, 2 stderr) captured into
// out, with its newlines folded into | where fold is set (so a report stays on one
// line); returns the exit status (128 + signal when killed). A child that returns
// normally exits 0. Everything the child writes is read, so it never blocks on a
// full pipe; what does not fit in out is dropped.
static inline int run_child_capture(void (*fn)(void *), void *ctx, int fd, int fold, char *out, size_t out_size) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], fd);
        fn(ctx);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t k;
    char sink[256];
    while ((k = read(fds[0], len + 1 < out_size ? out + len : sink,
                     len + 1 < out_size ? out_size - 1 - len : sizeof sink)) > 0)
        if (len + 1 < out_size) len += (size_t)k;
    out[len] = '\0';
    if (fold) {
        while (len > 0 && out[len - 1] == '\n') out[--len] = '\0';
        for (size_t i = 0; i < len; i++)
            if (out[i] == '\n') out[i] = '|';
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// fn(ctx) in a child with stderr captured into err, one line (the fatal-error tests).
static inline int run_child(void (*fn)(void *), void *ctx, char *err, size_t err_size) {
    return run_child_capture(fn, ctx, 2, 1, err, err_size);
}

#endif
