// tests/run_child.h — run a function in a fork()ed child with its stderr captured:
// the tests of fatal errors need it, because die() ends the process.
// Include after the test's feature macro (_GNU_SOURCE) and system headers.
#ifndef FEMTOTRON_RUN_CHILD_H
#define FEMTOTRON_RUN_CHILD_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

// Run fn(ctx) in a child with stderr captured into err (newlines folded into |, so a
// report stays on one line); returns the exit status (128 + signal when killed). A
// child that returns normally exits 0.
static inline int run_child(void (*fn)(void *), void *ctx, char *err, size_t err_size) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(ctx);
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t k;
    char sink[256];
    // Drain everything (so the child never blocks on a full pipe), keep what fits.
    while ((k = read(fds[0], len + 1 < err_size ? err + len : sink,
                     len + 1 < err_size ? err_size - 1 - len : sizeof sink)) > 0)
        if (len + 1 < err_size) len += (size_t)k;
    err[len] = '\0';
    // One line per PASS/FAIL report: fold the child's newlines.
    while (len > 0 && err[len - 1] == '\n') err[--len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (err[i] == '\n') err[i] = '|';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
