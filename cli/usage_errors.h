// What muster says when its command line does not parse: CLI11's findings in muster's words,
// with the fix an mpirun or srun user needs (the command after --, the flag they meant).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace muster::cli {

// The message for `error`, raised parsing `argv` with `app` whose visible commands are
// `commands`: names the subcommand, the word at fault and the fix ("unknown option '--jsn'
// for 'muster doctor', did you mean '--json'?; see 'muster doctor --help'").
std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error, int argc,
                                char** argv, const std::vector<std::string>& commands);

// The habit of an mpirun or srun user that muster's parser would get wrong, said before
// parsing: a command after the flags without "--" whose own options follow it ("put the
// command after --: muster run -n 2 -- ls -l /"), mpirun's "-np".
std::optional<std::string> habit_to_correct(const CLI::App& app, int argc, char** argv);

// "unknown option '--verison', did you mean '--version'?" for a word before the command that
// is a misspelt option of muster's own (--help, --version); nullopt for any other word.
std::optional<std::string> misspelt_top_option(const std::string& typed);
// "'doctr' is not a muster command, did you mean 'doctor'? The commands are ...".
std::string explain_unknown_command(const std::string& typed, const std::vector<std::string>& commands);

}  // namespace muster::cli
