<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\AuthenticationException;
use Veil\Exception\BudgetExhaustedException;
use Veil\Exception\InvalidRequestException;
use Veil\Exception\NotFoundException;
use Veil\Exception\OutcomeUnknownException;
use Veil\Exception\RateLimitedException;
use Veil\Exception\ServerException;
use Veil\Exception\UnsupportedQueryException;
use Veil\Problem;

/** Every problem type the service can answer with becomes a typed exception. */
final class ProblemTest extends TestCase
{
    private const EXPECTED = [
        'unauthorized' => AuthenticationException::class,
        'forbidden' => AuthenticationException::class,
        'not-found' => NotFoundException::class,
        'method-not-allowed' => InvalidRequestException::class,
        'invalid-request' => InvalidRequestException::class,
        'invalid-argument' => InvalidRequestException::class,
        'bounds' => InvalidRequestException::class,
        'schema' => InvalidRequestException::class,
        'unsupported-query' => UnsupportedQueryException::class,
        'budget-exhausted' => BudgetExhaustedException::class,
        'payload-too-large' => InvalidRequestException::class,
        'rate-limited' => RateLimitedException::class,
        'query-failed' => ServerException::class,
        'internal-error' => ServerException::class,
        'unavailable' => ServerException::class,
        'outcome-unknown' => OutcomeUnknownException::class,
    ];

    /** The types listed at GET /problems: a new one fails here until the client maps it. */
    public function testEveryTypeTheServiceServesIsMapped(): void
    {
        $curl = curl_init(self::server()->baseUrl . '/problems');
        curl_setopt($curl, CURLOPT_RETURNTRANSFER, true);
        $served = json_decode((string) curl_exec($curl), true, 16, JSON_THROW_ON_ERROR)['problems'];
        curl_close($curl);

        $slugs = [];
        foreach ($served as $type) {
            self::assertStringStartsWith(Problem::PREFIX, $type['type']);
            $slug = substr($type['type'], strlen(Problem::PREFIX));
            $slugs[] = $slug;
            self::assertArrayHasKey($slug, self::EXPECTED, "the client does not map $slug");
            $budget = ['kind' => 'pure', 'epsilon' => 1.0, 'delta' => 0.0, 'exact' => ['epsilon' => '1']];
            $problem = Problem::fromResponse($type['status'], ['retry-after' => '7'], [
                'type' => $type['type'],
                'title' => $type['title'],
                'status' => $type['status'],
                'detail' => 'a detail',
                'requested' => $budget,
                'remaining' => $budget,
                'line' => 2,
                'column' => 5,
                'reservation' => 41,
                'fingerprint' => 'f00d',
            ]);
            $exception = $problem->toException();
            self::assertSame(self::EXPECTED[$slug], $exception::class, $slug);
            self::assertSame($type['status'], $exception->getCode());
            self::assertSame('a detail', $exception->getMessage());
            if ($exception instanceof RateLimitedException) {
                self::assertSame(7, $exception->retryAfter);
            }
            if ($exception instanceof UnsupportedQueryException) {
                self::assertSame([2, 5], [$exception->line(), $exception->column()]);
            }
            if ($exception instanceof OutcomeUnknownException) {
                // the charge to look up, and still a TimeoutException: never simply re-sent
                self::assertSame([41, 'f00d'], [$exception->reservation, $exception->fingerprint]);
                self::assertSame($problem, $exception->problem);
            }
        }
        sort($slugs);
        $expected = array_keys(self::EXPECTED);
        sort($expected);
        self::assertSame($expected, $slugs, 'the client maps types the service no longer has');
    }

    public function testAnErrorPageThatIsNotAProblemDocumentIsAServerError(): void
    {
        $e = Problem::fromResponse(502, [], null)->toException();

        self::assertInstanceOf(ServerException::class, $e);
        self::assertSame(502, $e->getCode());
        self::assertSame('about:blank', $e->type());
    }
}
