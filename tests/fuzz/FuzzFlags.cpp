// Fuzz target: the command lines of every tool (tlc, tlc train, tlc ladder, tl-run,
// tl-modelgen), run as a user runs them, in a scratch directory. The input is text: the
// first word picks the tool, the rest are its arguments; @model, @program, @weights,
// @tokens and @fifo name files prepared in the scratch directory (a tiny model, its
// Program, weights, token ids and a FIFO nobody writes). Arguments with '/' or '..' are
// dropped: outputs stay in the scratch directory.
//
// A finding is a tool that dies of a signal, exits with a status other than 0 or 1,
// fails without a message, says "error:" and exits 0, prints a crash report or a
// sanitizer's, waits on its input without working (10 s with under 1 s of CPU), or
// leaves a temporary file behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace {

namespace fs = std::filesystem;

[[noreturn]] void finding(const std::string &what, const std::vector<std::string> &argv, const std::string &err) {
  std::string command;
  for (const std::string &arg : argv) command += " " + arg;
  std::fprintf(stderr, "fuzz-flags finding: %s\n  command:%s\n  stderr: %s\n", what.c_str(), command.c_str(),
               err.substr(0, 2000).c_str());
  std::abort();
}

struct Scratch {
  fs::path directory, model, program, weights, tokens, fifo;
};

struct Result {
  int status = 0;
  bool timedOut = false;
  double cpuSeconds = 0;
  std::string err;
};

// Runs `argv` in `directory` with stdin from /dev/null, stdout discarded, stderr kept;
// killed after `seconds`.
Result runTool(const std::vector<std::string> &argv, const fs::path &directory, double seconds) {
  fs::path errPath = directory / ".stderr";
  pid_t child = ::fork();
  if (child < 0) std::abort();
  if (child == 0) {
    ::setpgid(0, 0);
    if (::chdir(directory.c_str()) != 0) ::_exit(120);
    int in = ::open("/dev/null", O_RDONLY), out = ::open("/dev/null", O_WRONLY),
        err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char *> args;
    for (const std::string &arg : argv) args.push_back(const_cast<char *>(arg.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(121);
  }
  Result result;
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  struct rusage usage {};
  while (true) {
    pid_t done = ::wait4(child, &status, WNOHANG, &usage);
    if (done == child) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds)) {
      ::kill(-child, SIGKILL);
      ::wait4(child, &status, 0, &usage);
      result.timedOut = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.status = status;
  result.cpuSeconds = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  std::ifstream file(errPath, std::ios::binary);
  result.err.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  fs::remove(errPath);
  return result;
}

// The scratch directory goes at exit (a path kept where static destructors cannot reach it).
void removeAtExit(const fs::path &directory) {
  static std::string *path = new std::string(directory.string());
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(*path, ignored);
  });
}

const Scratch &scratch() {
  static const Scratch prepared = [] {
    Scratch s;
    std::string pattern = (fs::temp_directory_path() / "tlc-fuzz-flags-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) std::abort();
    s.directory = pattern;
    removeAtExit(s.directory);
    s.model = s.directory / "model.tl";
    fs::copy_file(TLC_FUZZ_MODEL, s.model);
    s.program = s.directory / "program.json";
    s.weights = s.directory / "weights.safetensors";
    s.tokens = s.directory / "tokens.txt";
    s.fifo = s.directory / "fifo";
    std::ofstream(s.tokens) << "1 2 3 4\n";
    ::mkfifo(s.fifo.c_str(), 0644);
    Result made = runTool({TLC_FUZZ_TLC, s.model.string(), "--seq-len=4", "--emit=program", "-o", s.program.string()},
                          s.directory, 60);
    Result saved = runTool({TLC_FUZZ_TLC, s.model.string(), "--seq-len=4", "--run", "--save-weights=" + s.weights.string()},
                           s.directory, 60);
    if (made.status != 0 || saved.status != 0) {
      std::fprintf(stderr, "fuzz-flags: cannot prepare the scratch files: %s%s\n", made.err.c_str(), saved.err.c_str());
      std::abort();
    }
    fs::create_directories(s.directory / "pristine");
    for (const fs::path *file : {&s.model, &s.program, &s.weights, &s.tokens})
      fs::copy_file(*file, s.directory / "pristine" / file->filename());
    // The children: small memory, their own JIT cache.
    ::setenv("TLC_MEMORY_LIMIT", "256M", 1);
    ::setenv("TLC_CACHE_DIR", (s.directory / "cache").c_str(), 1);
    return s;
  }();
  return prepared;
}

// Files the command left in the scratch directory are removed and the prepared ones
// restored (a command may have written over them); a temporary among them is a finding.
void cleanScratch(const std::vector<std::string> &argv, const std::string &err) {
  const Scratch &s = scratch();
  for (auto it = fs::recursive_directory_iterator(s.directory); it != fs::recursive_directory_iterator(); ++it)
    if (it->path().filename().string().find(".tmp-") != std::string::npos)
      finding("a temporary file was left behind: " + it->path().string(), argv, err);
  for (const auto &entry : fs::directory_iterator(s.directory)) {
    const fs::path &path = entry.path();
    if (path == s.fifo || path.filename() == "cache" || path.filename() == "pristine") continue;
    std::error_code ignored;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path, ignored);
  }
  for (const fs::path *file : {&s.model, &s.program, &s.weights, &s.tokens})
    fs::copy_file(s.directory / "pristine" / file->filename(), *file, fs::copy_options::overwrite_existing);
  if (!fs::is_fifo(s.fifo)) {
    fs::remove_all(s.fifo);
    ::mkfifo(s.fifo.c_str(), 0644);
  }
}

std::vector<std::string> commandFrom(const uint8_t *data, size_t size) {
  const Scratch &s = scratch();
  std::istringstream words(std::string(reinterpret_cast<const char *>(data), size));
  std::vector<std::string> tokens;
  for (std::string word; words >> word && tokens.size() < 25;) tokens.push_back(word.substr(0, 200));
  std::vector<std::string> argv;
  size_t first = 1;
  std::string tool = tokens.empty() ? "tlc" : tokens[0];
  if (tool == "tl-run") {
    argv = {TLC_FUZZ_TL_RUN};
  } else if (tool == "tl-modelgen") {
    argv = {TLC_FUZZ_TL_MODELGEN};
  } else if (tool == "train" || tool == "ladder") {
    argv = {TLC_FUZZ_TLC, tool};
  } else {
    argv = {TLC_FUZZ_TLC};
    first = tool == "tlc" ? 1 : 0;  // any other first word is tlc's first argument
  }
  auto substitute = [&](std::string word) {
    for (auto [name, path] : {std::pair{"@model", &s.model}, std::pair{"@program", &s.program},
                              std::pair{"@weights", &s.weights}, std::pair{"@tokens", &s.tokens},
                              std::pair{"@fifo", &s.fifo}})
      for (size_t at; (at = word.find(name)) != std::string::npos;) word.replace(at, std::strlen(name), path->string());
    return word;
  };
  for (size_t i = first; i < tokens.size(); ++i) {
    const std::string &word = tokens[i];
    if (word.find('/') != std::string::npos || word.find("..") != std::string::npos) continue;
    argv.push_back(substitute(word));
  }
  return argv;
}

// The first line of a crash or sanitizer report in `err` ("" if none). Reports start their
// lines; a tool quoting a mutated argument back ("unknown argument '-xSanitizer'") is not one.
std::string crashReport(const std::string &err) {
  static const std::regex report(
      R"((==[0-9]+==\s*ERROR: .*Sanitizer.*)|(SUMMARY: [A-Za-z]*Sanitizer.*)|([^ '"]+:[0-9]+:[0-9]+: runtime error: .*))"
      R"(|(Stack dump:.*)|(PLEASE submit a bug report.*)|(LLVM ERROR: .*))");
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);)
    if (std::regex_match(line, report)) return line;
  return "";
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string> argv = commandFrom(data, size);
  Result run = runTool(argv, scratch().directory, 10);
  const std::string &err = run.err;
  if (std::string report = crashReport(err); !report.empty())
    finding("a crash or sanitizer report: " + report, argv, err);
  if (run.timedOut) {
    if (run.cpuSeconds < 1) finding("waited 10 s without working (blocked on an input?)", argv, err);
    cleanScratch(argv, err);
    return 0;  // busy: a long but legitimate run (many steps, a large model)
  }
  if (WIFSIGNALED(run.status)) finding("killed by signal " + std::to_string(WTERMSIG(run.status)), argv, err);
  int code = WEXITSTATUS(run.status);
  if (code != 0 && code != 1) finding("exit status " + std::to_string(code), argv, err);
  // (LLVM's own option parser says "for the --x option: ..." without "error": a message still.)
  if (code == 1 && err.find_first_not_of(" \n\t") == std::string::npos) finding("failed without saying why", argv, err);
  if (code == 0 && err.find("error:") != std::string::npos) finding("said error: and exited 0", argv, err);
  cleanScratch(argv, err);
  return 0;
}
