/*
 * main.c - the msched command: one table of subcommands, dispatch, help and version.
 *
 * Design
 *   `msched <command> [options]`. Each command lives in cli/cmd_<name>.c and is listed in
 *   `commands` below; `msched help` prints the list, `msched help <command>` (or
 *   `msched <command> --help`) its usage. Exit status: 0 success, 1 the work failed,
 *   2 bad command line; every error is one line on stderr starting with "msched: ".
 */
#include "cli/cli.h"

#include <string.h>

static const struct ms_cli_cmd *const commands[] = {&ms_cmd_run, &ms_cmd_profile, &ms_cli_status,
                                                    &ms_cli_top, &ms_cli_config,  &ms_cmd_sim,
                                                    &ms_cmd_demo};

static void usage(FILE *f)
{
    fprintf(f, "usage: msched <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < MS_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-7s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-7s %s\n", "help", "show this list, or a command's options: msched help sim");
    fprintf(f, "\nmsched --version prints the version.\n");
}

static const struct ms_cli_cmd *find(const char *name)
{
    for (size_t i = 0; i < MS_ARRAY_LEN(commands); i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        ms_cli_error("no command given (try 'msched help')");
        return MS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("msched %s\n", MS_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc > 2) {
            const struct ms_cli_cmd *c = find(argv[2]);
            if (!c) {
                ms_cli_error("unknown command '%s' (try 'msched help')", argv[2]);
                return MS_EXIT_USAGE;
            }
            c->help(stdout);
            return 0;
        }
        usage(stdout);
        return 0;
    }
    const struct ms_cli_cmd *c = find(cmd);
    if (!c) {
        ms_cli_error("unknown command '%s' (try 'msched help')", cmd);
        return MS_EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
