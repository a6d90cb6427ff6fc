// data/input_list.h — the inputs of `femtotron prepare`, expanded from what the
// command line names into the files read, in a fixed order.
//
// Each name is, in this order of checks:
//   "-"            standard input (at most once in all)
//   a directory    every file below it that the filter selects, recursively
//   a glob         when it holds * ? or [ and is not itself an existing path: its
//                  matches (glob(3)), files read whatever their name, directories
//                  expanded as above (one with nothing selected adds nothing)
//   anything else  a file, read whatever its name (its existence is checked later)
// Order: names in the order given; the matches of one glob, and the entries of
// one directory, sorted by strcmp (byte order), a subdirectory's files at the
// place of its name; so the shards never depend on the file system's order.
// Directory filter: names starting with "." (hidden files and directories) are
// skipped; symbolic links to files are read, links to directories not followed
// (no cycles); a regular file is read when its name, less a .gz or .zst suffix,
// ends in .txt, .text, .md, .jsonl or .ndjson, or, when --include globs are
// given, when it matches one of them (fnmatch on the name without its directory)
// instead.
#ifndef FEMTOTRON_INPUT_LIST_H
#define FEMTOTRON_INPUT_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char **paths;             // (n, cap) the files to read, owned; "-" is standard input
    size_t n, cap;
    const char *const *include;  // (n_include) --include globs; none: the suffix rule
    size_t n_include;
    bool stdin_taken;         // "-" is already in the list (as an input or a list file)
} InputList;

// Expand one name (see above) onto the end of the list. Fatal errors name the
// problem: a glob without matches, a directory that cannot be read or holds no
// selected file, a glob that yields no file, standard input named twice.
void input_list_add(InputList *l, const char *name);

// Expand every line of the file `list_path` ("-": standard input) as a name, in
// order. A line is a name as it stands (no quoting; a trailing "\r" dropped);
// blank lines are skipped; relative names are relative to the current directory.
void input_list_add_listed(InputList *l, const char *list_path);

// Whether the directory filter selects a file called `name` (no directory part).
bool input_list_selects(const InputList *l, const char *name);

void input_list_free(InputList *l);

#endif
