// config_internal.h — what the config files share; not part of the API (config.h).
// One job each:
//   config_keys.c      the key table: defaults, lookups, a key set from text or JSON
//   config_load.c      JSON config files and --section.key overrides
//   config_hf.c        model.from: the model keys from a Hugging Face config.json
//   config_validate.c  the rules every run configuration must satisfy
//   config_output.c    --help, the config as JSON, a checkpoint's config.json
#ifndef FEMTOTRON_CONFIG_INTERNAL_H
#define FEMTOTRON_CONFIG_INTERNAL_H

#include <cJSON.h>
#include <stddef.h>

#include "config.h"

// KT_ENUM: one of a fixed set of spellings (KeyDef.names), stored as the index of
// the spelling in an int-sized enum field (config.h: Recompute, PpSchedule, ...).
// KT_SOURCES: data.train / data.val, a string of up to CFG_DATA_MAX characters, or in
// JSON a list of sources, kept as its JSON text (config_data_sources reads both).
typedef enum { KT_INT, KT_U64, KT_DOUBLE, KT_BOOL, KT_STRING, KT_ENUM, KT_SOURCES } KeyType;

typedef struct {
    const char *section;
    const char *key;
    KeyType type;
    size_t offset;       // offsetof(Config, section.key)
    const char *def;     // default, written as an override value would be
    const char *hf_def;  // model keys: transformers' LlamaConfig default, used when
                         // FROM/config.json lacks the key (NULL: no such default)
    const char *help;
    const char *const *names;  // KT_ENUM: the spellings, NULL-terminated, indexed by value
} KeyDef;

// The key table (config_keys.c): CFG_NKEYS keys, section by section.
extern const KeyDef CFG_KEYS[];
extern const int CFG_NKEYS;
extern const char *const CFG_SECTIONS[];
extern const int CFG_NSECTIONS;

// Largest integer a JSON number (an IEEE double) holds exactly.
#define JSON_MAX_EXACT 9007199254740992.0

// ---------------------------------------------------------------- config_keys.c

void *cfg_field_ptr(Config *c, const KeyDef *k);
// Index in CFG_KEYS of section.key (section: section_len bytes), or -1.
int cfg_key_index(const char *section, size_t section_len, const char *key);
int cfg_is_section(const char *s);
int cfg_is_model_from(const KeyDef *k);
// One of the MixtralConfig keys (num_local_experts, ...): written to config.json only for MoE.
int cfg_is_moe_key(const KeyDef *k);
// Was key i given explicitly (Config.keys_set)? / Remember that it was.
int cfg_key_given(const Config *c, int i);
void cfg_mark_given(Config *c, int i);
// Fatal: an unknown key, with a "did you mean" hint.
void cfg_die_unknown_key(const char *origin, const char *dotted) __attribute__((noreturn));
// Set key k of c from override text (as the defaults are written).
void cfg_set_text(Config *c, const KeyDef *k, const char *text, const char *origin);
// Set key k of c from a JSON value of the key's type; `name` is the key's spelling there.
void cfg_set_json(Config *c, const KeyDef *k, const cJSON *v, const char *origin, const char *name);

// ---------------------------------------------------------------- config_load.c

// Whole file as a NUL-terminated string (caller frees); NULL with errno set.
char *cfg_read_text_file(const char *path);
// Parse or die naming the line, column and text where parsing stopped.
cJSON *cfg_parse_or_die(const char *text, const char *origin);
// Child `name` of an object, matched case-sensitively.
const cJSON *cfg_child(const cJSON *obj, const char *name);

#endif
