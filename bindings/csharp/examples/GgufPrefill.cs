// Opens the GGUF file named on the command line, prefills ten token ids and
// prints the five most likely next tokens (the same program as in the other
// bindings' READMEs). See ../README.md.
using System;
using System.Globalization;
using System.Linq;
using Qsp;

static class GgufPrefill
{
    static int Main(string[] args)
    {
        if (args.Length != 1)
        {
            Console.Error.WriteLine("usage: GgufPrefill.exe MODEL.gguf");
            return 2;
        }
        int[] tokens = { 1, 7, 42, 100, 255, 0, 128, 64, 3, 200 };
        float[] logits;
        using (var ctx = Context.FromGguf(args[0], new ExecOptions { Backend = Backend.Cpu, NThreads = 2 }))
        {
            ctx.Prefill(tokens);
            logits = ctx.Logits();
        }
        var top = Enumerable.Range(0, logits.Length).OrderByDescending(t => logits[t]).ThenBy(t => t).Take(5);
        Console.WriteLine("top 5 of {0} logits after {1} tokens:", logits.Length, tokens.Length);
        foreach (int t in top)
            Console.WriteLine(string.Format(CultureInfo.InvariantCulture, "{0} {1:F4}", t, logits[t]));
        return 0;
    }
}
