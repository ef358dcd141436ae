#include "prompts.h"

#include "rest/types.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace {

// A whole file (through gzip -dc for .gz); `what` names it in errors.
std::string read_all(const std::string & path, const std::string & what) {
    if (path == "-") {  // standard input, as `rest index build -` reads it: `... | rest generate -f -`
        std::string out((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        if (std::cin.bad()) throw rest::user_error("cannot read the " + what + " from standard input");
        return out;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        throw rest::user_error(what + " '" + path + "' is a directory");  // an ifstream reads one as empty
    }
    if (path.ends_with(".gz")) {
        std::string quoted = "'";  // for the shell: each ' closes the quote, adds an escaped one and reopens
        for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        quoted += "'";
        std::FILE * p = popen(("gzip -dc " + quoted + " 2>/dev/null").c_str(), "r");
        if (!p) {
            throw rest::user_error("cannot run gzip to read '" + path + "'");
        }
        std::string out;
        char        buf[65536];
        size_t      n;
        while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) {
            out.append(buf, n);
        }
        if (pclose(p) != 0) {
            throw rest::user_error("cannot decompress '" + path + "' (missing or not gzip)");
        }
        return out;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw rest::user_error("cannot open " + what + " '" + path + "'");
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The value at a dotted path ("a.b"), or nullptr.
const nlohmann::json * at_path(const nlohmann::json & rec, const std::string & field) {
    const nlohmann::json * cur = &rec;
    size_t                 start = 0;
    while (start <= field.size()) {
        const size_t      dot = field.find('.', start);
        const std::string key = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (!cur->is_object() || !cur->contains(key)) {
            return nullptr;
        }
        cur = &(*cur)[key];
        if (dot == std::string::npos) {
            break;
        }
        start = dot + 1;
    }
    return cur;
}

// A string gives one turn, an array of strings gives several.
bool extract(const nlohmann::json & rec, const std::string & field, prompt_record & out) {
    const nlohmann::json * cur = at_path(rec, field);
    if (!cur) {
        return false;
    }
    if (cur->is_string()) {
        out.turns.push_back(cur->get<std::string>());
        return true;
    }
    if (cur->is_array()) {
        for (const auto & v : *cur) {
            if (!v.is_string()) {
                return false;
            }
            out.turns.push_back(v.get<std::string>());
        }
        return !out.turns.empty();
    }
    return false;
}

}  // namespace

std::string read_text_file(const std::string & path) {
    return read_all(path, "prediction file");
}

std::vector<prompt_record> read_prompt_file(const std::string & path, const std::string & field,
                                            const std::string & prediction_field) {
    const std::string text = read_all(path, "prompt file");
    const bool        json = path.ends_with(".jsonl") || path.ends_with(".jsonl.gz") || path.ends_with(".json");
    std::vector<prompt_record> out;
    if (!json) {
        if (!prediction_field.empty()) {
            throw rest::user_error("--prediction-field needs a .jsonl or .json prompt file, not '" + path + "'");
        }
        out.push_back({{text}, {}});
        return out;
    }
    auto take = [&](const nlohmann::json & rec, const std::string & where) {
        prompt_record r;
        if (!extract(rec, field, r)) {
            throw rest::user_error(where + ": no string (or list of strings) at field '" + field + "'");
        }
        if (!prediction_field.empty()) {
            const nlohmann::json * p = at_path(rec, prediction_field);
            if (!p || !p->is_string()) {
                throw rest::user_error(where + ": no string at prediction field '" + prediction_field + "'");
            }
            r.prediction = p->get<std::string>();
        }
        out.push_back(std::move(r));
    };
    if (path.ends_with(".json")) {
        nlohmann::json doc;
        try {
            doc = nlohmann::json::parse(text);
        } catch (const std::exception & e) {
            throw rest::user_error(path + ": invalid JSON (" + std::string(e.what()) + ")");
        }
        if (!doc.is_array()) {
            throw rest::user_error(path + ": expected a JSON array of records");
        }
        for (size_t i = 0; i < doc.size(); ++i) {
            take(doc[i], path + " record " + std::to_string(i + 1));
        }
        return out;
    }
    std::istringstream in(text);
    std::string        line;
    for (size_t lineno = 1; std::getline(in, line); ++lineno) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
            continue;
        }
        nlohmann::json rec;
        try {
            rec = nlohmann::json::parse(line);
        } catch (const std::exception &) {
            throw rest::user_error(path + ":" + std::to_string(lineno) + ": invalid JSON");
        }
        take(rec, path + ":" + std::to_string(lineno));
    }
    if (out.empty()) {
        throw rest::user_error(path + ": no prompts");
    }
    return out;
}
